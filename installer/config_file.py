"""The configuration file the installer writes: TOML, flat keys, each key's reason as a comment above it.

Writes atomically (temporary file, fsync, rename) and reads back keys and reasons for
`strata setup --show`. It does not validate values against the server's options; the server's
loader (`strata.server.config`) does that when it reads the file. The format is the one of
docs/internals.md "Configuration": keys are the long flags with `-` -> `_`, plus an optional
`[env]` table of `STRATA_*` variables.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import tomli_w

from strata import folders
from strata.toml_paths import backslash_hint, escaped_paths

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from strata.installer.plan import SESSIONS_FOLDER
from strata.installer.plan_types import Choice, Plan

HEADER = "# Strata configuration, written by `strata setup`. Flags given to `strata serve` override it."


class ConfigFileError(ValueError):
    """A configuration file that cannot be read; the message names the file and the problem."""


def default_config_path() -> Path:
    """The platform's user config folder: ~/.config/strata/config.toml, %APPDATA%/strata/config.toml, ..."""
    return folders.config_dir() / "config.toml"


def configured_path(environ: dict[str, str] | None = None) -> Path:
    """The file `strata serve` reads without --config: $STRATA_CONFIG when set, else the default."""
    env = os.environ if environ is None else environ
    return Path(env["STRATA_CONFIG"]).expanduser() if env.get("STRATA_CONFIG") else default_config_path()


def default_cold_dir() -> Path:
    """Where conversations kept on disk go unless the user picks another folder."""
    return folders.cache_dir() / "conversations"  # as server/cache/options.py


# The keys `strata setup` decides (plan.py's choices; tests/installer/test_older_setup_files.py holds the two
# equal). A file setup wrote without one of them was written by an earlier setup, before it decided that key.
SETUP_KEYS = ("model", "threads", "ctx", "batch", "backend", "batch_groups", "slot_ctx", "kv_type",
              "conversation_cache_mib", "conversation_cache_cold_dir", "conversation_cache_cold_mib",
              "conversation_cache_warm_dir", "conversation_cache_warm_mib", "conversation_cache_park",
              "conversation_cache_min_free_mib", "conversation_cache_park_min_free_mib",
              "conversation_cache_sessions_mib")
# Of those, the keys setup writes as the server's default (said in the plan so the user sees it: where sessions go
# and how big they may get): a file without one means the same, and is not told to run setup again for it
AS_THE_DEFAULT = ("conversation_cache_sessions_mib",)


def left_out_by_an_earlier_setup(text: str, values: dict[str, Any]) -> list[str]:
    """The keys today's setup decides that a file an earlier setup wrote lacks (pure): there the server's
    defaults apply, not this machine's plan (the first setups wrote no `backend`: a CUDA machine ran on the
    CPU). [] for a file setup did not write: hand-written, its missing keys are meant as defaults."""
    if not text.lstrip("\ufeff").startswith(HEADER):
        return []
    hand_set_warm = isinstance(values.get(HAND_SET_WARM[0]), str) and bool(values.get(HAND_SET_WARM[0]))
    return [k for k in SETUP_KEYS if k not in values and k not in AS_THE_DEFAULT
            and not (hand_set_warm and k in HAND_SET_WARM)]


def earlier_setup_note(path: str | os.PathLike[str]) -> str | None:
    """What `strata serve` and `strata setup --show` say of a file an earlier setup wrote (None otherwise, or
    when it cannot be read: the loader says why)."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
        missing = left_out_by_an_earlier_setup(text, tomllib.loads(text))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return None
    if not missing:
        return None
    return (f"{path} was written by an earlier `strata setup`, before it decided {', '.join(missing)}: the "
            "server's defaults apply there; run `strata setup` again to have them decided for this machine (it "
            f"keeps the keys it does not decide, and this file as {backup_path(Path(path)).name})")


KEPT = "Kept from the previous file: keys `strata setup` does not decide (set by hand, or by another program)."


def carried_over(plan: Plan, previous: dict[str, Any]) -> dict[str, Any]:
    """The previous file's keys the plan does not decide (`port`, `host`, `api_key`, the `[env]` table, any
    other): setup keeps them, in their order; the plan's own keys it writes anew, and drops their other names
    (`conversation_cache_disk_mib` beside the plan's `conversation_cache_cold_mib`: the server refuses two)."""
    from strata.server.config import all_options  # the server's table of options and their aliases

    decided = {c.key for c in plan.choices}
    for option in all_options():
        if option.key in decided:
            decided.update(name.replace("-", "_") for name in option.names())
    return {k: v for k, v in previous.items() if k not in decided}


HAND_SET_WARM = ("conversation_cache_warm_dir", "conversation_cache_warm_mib")
HAND_SET_SESSIONS = "conversation_cache_sessions_mib"
SESSIONS_DIR = "conversation_cache_sessions_dir"   # never the plan's: kept by a re-run (carried_over)


def with_hand_set(plan: Plan, previous: dict[str, Any]) -> Plan:
    """The plan with what the previous file set by hand and setup never sets kept: a warm level (setup never turns
    one on: it needs a second, faster disk, which setup does not look for, so its plan writes the level off, and a
    re-run lost the user's level to the `.bak`), and a budget for the saved-sessions folder (the plan writes no
    limit; its reason names a sessions folder set by hand, which the re-run keeps, where it says where saves go)."""
    folder = previous.get(HAND_SET_WARM[0])
    warm = isinstance(folder, str) and bool(folder)
    sessions = previous.get(HAND_SET_SESSIONS)
    sessions_set = isinstance(sessions, int) and not isinstance(sessions, bool) and sessions > 0
    sessions_dir = previous.get(SESSIONS_DIR)
    dir_set = isinstance(sessions_dir, str) and bool(sessions_dir)
    if not warm and not sessions_set and not dir_set:
        return plan
    choices = []
    for c in plan.choices:
        if c.key == HAND_SET_SESSIONS and sessions_set:
            choices.append(Choice(c.key, sessions, "kept from the file there: a sessions folder budget set by hand "
                                                   "(setup never sets one)"))
        elif c.key == HAND_SET_SESSIONS and dir_set:
            choices.append(replace(c, reason=c.reason.replace(SESSIONS_FOLDER, f"{sessions_dir} (set by hand)")))
        elif c.key not in HAND_SET_WARM or not warm:
            choices.append(c)
        elif c.key in previous:        # a budget not given is the server's default for the level, as before
            choices.append(Choice(c.key, previous[c.key],
                                  "kept from the file there: a warm level set by hand (setup never turns one on)"))
    return replace(plan, choices=tuple(choices))


def previous_file(path: Path) -> tuple[dict[str, Any], dict[str, str], str | None]:
    """(values, reasons, problem) of the file a setup is about to replace: empty when there is none, and when
    it cannot be read `problem` says why (nothing can be carried over; the `.bak` keeps it as it was)."""
    path = Path(path).expanduser()
    if not path.is_file():
        return {}, {}, None
    try:
        values, reasons = read(path)
    except ConfigFileError as e:
        return {}, {}, str(e)
    return values, reasons, None


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value))


def render(plan: Plan, written_at: datetime | None = None, kept: dict[str, Any] | None = None,
           kept_reasons: dict[str, str] | None = None,
           as_written: tuple[str, frozenset[str]] | None = None, key_lines: dict[str, str] | None = None) -> str:
    """The file's text: a header, the warnings, then each key with its reason as a comment; then `kept` (the
    previous file's keys the plan does not decide), each with the comment it had, its tables last (those
    `as_written` holds, tables_as_written, in the text they had; a key in `key_lines` as its line was)."""
    lines = [HEADER]
    if written_at is not None:
        lines.append(f"# Written {written_at.isoformat(timespec='seconds')}; `strata setup --show` prints it.")
    for warning in plan.warnings:
        lines.append(f"# WARNING: {warning}")
    lines.append("")
    for choice in plan.choices:
        lines.append(f"# {choice.reason}")
        lines.append(tomli_w.dumps({choice.key: choice.value}).rstrip("\n"))
    if kept:
        lines += ["", f"# {KEPT}"]
        for key, value in kept.items():
            if not _is_table(value):
                lines += _comment((kept_reasons or {}).get(key, ""))
                lines.append((key_lines or {}).get(key) or tomli_w.dumps({key: value}).rstrip("\n"))
        written, names = as_written or ("", frozenset())
        tables = {k: v for k, v in kept.items() if _is_table(v) and k not in names}   # after every plain key
        if tables:
            lines += ["", tomli_w.dumps(tables).rstrip("\n")]
        if written:
            lines += ["", written.rstrip("\n")]
    return "\n".join(lines) + "\n"


def key_lines_as_written(text: str, kept: dict[str, Any]) -> dict[str, str]:
    """The line each kept top-level key had, where that line alone reads as the same value: kept so, a comment
    after the value stays (`port = 8123  # the editor plugin's` lost it, written anew)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if TABLE_HEADER.match(line):
            break
        if not line or line.startswith("#"):
            continue
        try:
            one = tomllib.loads(line)
        except (tomllib.TOMLDecodeError, RecursionError):
            continue
        if len(one) == 1:
            key, value = next(iter(one.items()))
            if key in kept and kept[key] == value and not _is_table(value):
                out[key] = line
    return out


def tables_as_written(text: str, kept: dict[str, Any]) -> tuple[str, frozenset[str]] | None:
    """The previous file's tables as they were written, from the comment right above the first table header to
    the end, and the tables' names: kept so, their comments stay (written anew, [env]'s went on every run).
    None when that text does not hold exactly kept tables, as they read in the whole file."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if TABLE_HEADER.match(line.strip())), None)
    if first is None:
        return None
    while first > 0 and lines[first - 1].strip().startswith("#") and not _ours(lines[first - 1]):
        first -= 1
    tail = "\n".join(lines[first:])
    try:
        values = tomllib.loads(tail)
    except (tomllib.TOMLDecodeError, RecursionError):
        return None
    if not values or any(k not in kept or kept[k] != v or not _is_table(v) for k, v in values.items()):
        return None
    return tail + "\n", frozenset(values)


def write(plan: Plan, path: Path, written_at: datetime | None = None) -> Path:
    """Write `plan` to `path` atomically, creating its folder, with the keys of the file already there that the
    plan does not decide (`carried_over`); a different file already there is kept as `<name>.bak`. Returns the
    path written."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    previous, reasons, _ = previous_file(path)
    kept = carried_over(plan, previous)
    before = path.read_text(encoding="utf-8-sig") if kept else ""
    text = render(plan, written_at, kept, reasons, tables_as_written(before, kept) if kept else None,
                  key_lines_as_written(before, kept))
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if path.is_file() and path.read_text(encoding="utf-8", errors="replace") != text:
            # copied, not moved: the file stays in place until the new one replaces it. Moved first, a replace
            # that then failed (on Windows a scanner or an editor holding the file: PermissionError) left no
            # configuration at all, and the app took its next start for a first run
            keep_backup(path)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def keep_backup(path: Path) -> None:
    """`path` copied to its `.bak` with its own mode, never readable by more users than it was in between: the
    file may hold an `api_key`, and `write` makes it 0600 (mkstemp), where a plain copy (shutil.copyfile) makes a
    new `.bak` as umask allows (0644: any user of the machine could read the key). The copy is written to a
    private temporary file and renamed into place, as a move kept the mode before."""
    fd, tmp = tempfile.mkstemp(prefix=".config-", suffix=".bak", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(path.read_bytes())
        shutil.copymode(path, tmp)
        os.replace(tmp, backup_path(path))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_problem(path: Path) -> str | None:
    """Why `write` could not write `path`, found before the questions and the bench (setup asked everything,
    then failed: "cannot write /etc/passwd/strata.toml: File exists"); None when it can. Creates nothing
    that stays: a temporary file in the nearest existing folder, removed at once."""
    path = Path(path).expanduser()
    if path.is_dir():
        return "a folder, not a file"
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return f"cannot create files in {folder}: {e.strerror or e}"
    if path.exists() and not os.access(path, os.W_OK):
        return "no permission to replace it"
    return None


def backup_path(path: Path) -> Path:
    """Where `write` keeps the file it replaces."""
    return path.with_name(path.name + ".bak")


def read(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """(values, reasons) of a configuration file; a key without a comment above it has no reason."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8-sig")   # a byte-order mark (Notepad's UTF-8) is not TOML's
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: no configuration file there (run `strata setup`)") from None
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot read it: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigFileError(f"{path}: not UTF-8 text (byte {e.start}); write it again with `strata setup`") from None
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigFileError(f"{path}: not valid TOML: {e}{backslash_hint(text, str(e))}") from None
    except RecursionError:
        raise ConfigFileError(f"{path}: not valid TOML: nested too deeply") from None
    escaped = escaped_paths(values)
    if escaped:
        raise ConfigFileError(f"{path}: {escaped[0]}")
    return values, _reasons(text)


TABLE_HEADER = re.compile(r"""\[\[?\s*[\w\-."' ]+\s*\]\]?\s*(#.*)?$""")   # [env], [[a.b]]; not an array's line


def _reasons(text: str) -> dict[str, str]:
    """Each top-level key's comment: the comment lines right above it, one per line (a hand-set key's comment
    of two lines kept only its last). Keys in tables have none: a comment there is not a top-level key's."""
    reasons: dict[str, str] = {}
    comment: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            comment = [] if _ours(line) else [*comment, line.lstrip("#").strip()]
        elif TABLE_HEADER.match(line):
            break           # the tables, after every top-level key
        elif "=" in line:
            key = line.split("=", 1)[0].strip()
            if comment:
                reasons[key] = "\n".join(comment)
            comment = []
        else:
            comment = []
    return reasons


def _ours(line: str) -> bool:
    """Whether a comment line is one setup writes itself (the header, a warning, the kept keys' heading)."""
    return line.strip().lstrip("#").strip().startswith(("WARNING:", "Strata configuration", "Written ", KEPT[:20]))


def _comment(reason: str, indent: str = "") -> list[str]:
    return [f"{indent}# {line}" for line in reason.splitlines()]


def format_show(path: Path) -> str:
    """What `strata setup --show` prints: the file's location, then each key, value and reason."""
    values, reasons = read(path)
    flat = {k: v for k, v in values.items() if not isinstance(v, dict)}
    width = max((len(k) for k in flat), default=0)
    out = [f"configuration: {path}"]
    for key, value in flat.items():
        shown = tomli_w.dumps({"v": value})[4:].rstrip("\n")
        out.append(f"  {key:<{width}} = {shown}")
        if key in reasons:
            out += _comment(reasons[key], f"  {'':<{width}}   ")
    for table, entries in values.items():
        if isinstance(entries, dict):
            out.append(f"  [{table}]")
            out.extend(f"    {k} = {v!r}" for k, v in entries.items())
    return "\n".join(out)
