"""What the installer needs to know about a GGUF model file, and where models are found.

Mechanism: reads the file's metadata (the engine's native GGUF reader, else the `gguf` library;
memory-mapped, weights untouched) into a `ModelFacts` for the plan, after asking the engine whether it
runs the file at all (`check_model`: architecture, shapes and tensor types, nothing allocated), so that
the wizard asks again at once instead of writing a configuration the server cannot start. It does not
load the model; the bench (`bench.py`) does that. Finding
models is the engine's job (`strata.engine.models`); this module only calls it, with a fallback to
the default model's package when the engine's module is not there.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from strata.installer.plan_types import ModelFacts

from strata.model_names import DEFAULT_MODEL_FILE, DEFAULT_MODEL_PACKAGE, model_description, model_id
from strata.model_shape import attention_temperature, expert_count, trunk_layers


class ModelFileError(ValueError):
    """A model path the installer cannot use; the message names the file and the problem."""


def read_model_facts(path: str | Path) -> ModelFacts:
    path = Path(path).expanduser().absolute()  # the config file is read from any working folder
    if not path.is_file():
        raise ModelFileError(f"{path}: no such file")
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ModelFileError(f"{path}: not a GGUF file (no GGUF magic)")
    try:
        meta = _metadata(path)
    except Exception as e:  # the readers raise many types on a damaged file
        from strata.engine.models import damaged_file_advice

        said = str(e)
        for named in (f"GGUF {path}: ", f"{path}: "):   # the reader's own naming of the file: said once, first
            said = said.removeprefix(named)
        raise ModelFileError(f"{path}: cannot read its GGUF metadata: {said}{damaged_file_advice(e)}") from None
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelFileError(f"{path}: no general.architecture in its metadata")
    _check_engine_runs(path)

    def need(key: str) -> int:
        value = meta.get(f"{arch}.{key}")
        if not isinstance(value, int) or value < 1:
            raise ModelFileError(f"{path}: metadata {arch}.{key} is missing or invalid ({value!r})")
        return value

    n_head = need("attention.head_count")
    n_head_kv = meta.get(f"{arch}.attention.head_count_kv", n_head)
    head_dim = meta.get(f"{arch}.attention.key_length") or need("embedding_length") // n_head
    need("block_count")
    return ModelFacts(
        path=str(path), name=model_id(path), size_bytes=path.stat().st_size,
        n_layer=trunk_layers(meta), n_head_kv=int(n_head_kv), head_dim=int(head_dim),
        n_ctx_train=need("context_length"), arch=arch, description=model_description(meta),
        n_expert=expert_count(meta), attn_temperature=bool(attention_temperature(meta)),
        file_type=meta.get("general.file_type") if isinstance(meta.get("general.file_type"), int) else None)


def _check_engine_runs(path: Path) -> None:
    """ModelFileError with the engine's own words when it cannot run the file (nothing when the engine
    is not installed: the plan is then made from the metadata alone)."""
    try:
        from strata.engine import check_model
    except ImportError:
        return
    try:
        check_model(path)
    except ValueError as e:   # ModelError / GGUFError: the architecture, a tensor, a type
        raise ModelFileError(f"Strata cannot run this model: {e}") from None


def _metadata(path: Path) -> dict:
    """The file's metadata without the tokenizer's arrays: the engine's native reader (fast), else the
    `gguf` library (pure Python, seconds on a large vocabulary)."""
    try:
        from strata.engine import GGUFFile
    except ImportError:
        GGUFFile = None
    if GGUFFile is not None:
        return {k: _plain(v) for k, v in GGUFFile(path).metadata.items() if not k.startswith("tokenizer.")}
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {k: _value(f) for k, f in reader.fields.items() if not k.startswith("tokenizer.")}


def _plain(value):
    return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def _value(field):
    try:
        return _plain(field.contents())
    except Exception:
        return None


def find_models() -> tuple[tuple[str, ...], str | None]:
    """(GGUF files found that the engine runs, the default model's path or None), the default first."""
    found: list[str] = []
    default: str | None = None
    try:
        from strata.engine import models as engine_models
    except ImportError:
        engine_models = None
    if engine_models is not None and hasattr(engine_models, "find_models"):
        try:
            # neither unreadable files nor ones the engine cannot run (`strata models` lists those, marked)
            found = [str(_path_of(m)) for m in engine_models.find_models()
                     if not getattr(m, "error", None) and not getattr(m, "cannot_run", None)]
        except Exception:  # a broken search folder must not stop the installer
            found = []
    if engine_models is not None and hasattr(engine_models, "default_model_path"):
        try:
            d = engine_models.default_model_path()
            default = str(d) if d else None
        except Exception:
            default = None
    if default is None:
        default = _packaged_default_model()
    if default is not None and default not in found:
        found.insert(0, default)
    elif default is not None:
        found.remove(default)
        found.insert(0, default)
    return tuple(found), default


def _path_of(entry) -> Path:
    """find_models may give paths or records with a `path` attribute."""
    return Path(getattr(entry, "path", entry))


def _packaged_default_model() -> str | None:
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / DEFAULT_MODEL_FILE
        if candidate.is_file():
            return str(candidate)
    return None
