"""`strata serve`'s configuration: the TOML file, the command-line flags and the environment merged into
one validated `ServerConfig`.

Order, highest first: a flag, the option's environment variable (e.g. STRATA_API_KEY), the TOML file's
key, the default. The file's `[env]` table holds `STRATA_*` variables; a variable already in the
environment wins. Unknown keys, bad values and two aliases set to different values stop start-up with a
message naming them. This module reads files and the environment it is given; it starts nothing.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from strata.server.options import FLAG_REASONS, FLAG_SYNONYMS, OPTIONS, ConfigError, Option

from strata.cli import name_meant
from strata.toml_paths import backslash_hint, escaped_paths, names_a_written_path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["ConfigError", "ServerConfig", "all_options", "default_config_path", "file_problems", "load_config",
           "validate"]


def default_config_path() -> Path:
    """Where `strata setup` writes the configuration and `strata serve` reads it when no --config is given."""
    from strata import folders

    return folders.config_dir() / "config.toml"


def all_options() -> tuple[Option, ...]:
    """The server's options followed by every other part's table (the conversation cache's when present)."""
    options = list(OPTIONS)
    try:
        cache_options = importlib.import_module("strata.server.cache.options")
    except ImportError:
        cache_options = None
    if cache_options is not None:
        options.extend(Option.adopt(spec) for spec in getattr(cache_options, "OPTIONS", ()))
    return tuple(options)


@dataclass(frozen=True)
class ServerConfig:
    """Every option's value by key (`slot_ctx`, `conversation_cache_mib`, ...), the `STRATA_*` environment
    the policies read, and where the file came from. Server fields are exposed as properties."""

    values: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    config_path: str | None = None
    env_from_file: frozenset[str] = frozenset()   # the variables whose value is the file's [env] table's
    keys_from_file: frozenset[str] = frozenset()  # the options whose value is the file's

    def __getattr__(self, key: str) -> Any:
        values = object.__getattribute__(self, "values")
        if key in values:
            return values[key]
        raise AttributeError(key)

    def replace(self, **changes: Any) -> ServerConfig:
        return ServerConfig(values={**self.values, **changes}, env=self.env, config_path=self.config_path,
                            env_from_file=self.env_from_file, keys_from_file=self.keys_from_file)

    @property
    def slot_ctx_effective(self) -> int:
        return int(self.values["slot_ctx"] or self.values["ctx"])

    def url(self, port: int | None = None) -> str:
        """Where clients connect: `http://HOST:PORT`, an IPv6 address in brackets (`http://[::1]:8080`: without
        them no client can parse it); `port` when the one asked for was 0."""
        host = str(self.values["host"])
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.values['port'] if port is None else port}"

    @property
    def aliases(self) -> list[str]:
        raw = self.values.get("alias") or ""
        return [a.strip() for a in raw.split(",") if a.strip()]


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        # utf-8-sig: Windows Notepad may save UTF-8 with a byte-order mark, which TOML readers refuse as
        # "Invalid statement (at line 1, column 1)"
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
        table = tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {path} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"configuration file {path}: not valid TOML: {e}{backslash_hint(text, str(e))}") from None
    except UnicodeDecodeError as e:   # tomllib reads UTF-8 only; it raised this past the message above
        raise ConfigError(f"configuration file {path}: not valid TOML: not UTF-8 text (byte {e.start}: "
                          f"{e.object[e.start:e.start + 1]!r})") from None
    except RecursionError:
        raise ConfigError(f"configuration file {path}: cannot read it: arrays or tables nested about a "
                          "thousand deep") from None
    except OSError as e:
        raise ConfigError(f"configuration file {path}: cannot read it: {e}") from None
    escaped = escaped_paths(table)
    if escaped:
        raise ConfigError(f"configuration file {path}: {escaped[0]}")
    return table


def load_config(
    flags: Mapping[str, Any] | None = None,
    *,
    config_path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    use_default_file: bool = False,
    options: tuple[Option, ...] | None = None,
) -> ServerConfig:
    """Merges defaults < file < environment < flags. `flags` maps option keys (or alias keys) to raw values,
    None meaning "not given". With `use_default_file`, $STRATA_CONFIG's file is read (it must exist),
    else the installer's file when it exists."""
    options = options or all_options()
    environ = dict(os.environ if environ is None else environ)
    flags = dict(flags or {})
    path: Path | None = Path(config_path).expanduser() if config_path else None
    if path is None and use_default_file and environ.get("STRATA_CONFIG"):
        # named on purpose, so a missing file is a mistake (a typo would otherwise run on the defaults);
        # `~` expanded as `strata setup` expands it when it writes there
        path = Path(environ["STRATA_CONFIG"]).expanduser()
        if not path.is_file():
            raise ConfigError(f"STRATA_CONFIG={environ['STRATA_CONFIG']}: no such file (`strata setup` writes "
                              f"it; unset STRATA_CONFIG to use {default_config_path()})")
    elif path is None and use_default_file:
        candidate = default_config_path()
        path = candidate if candidate.is_file() else None
    table: dict[str, Any] = _read_toml(path) if path is not None else {}

    file_env = table.pop("env", {})
    if not isinstance(file_env, dict):
        raise ConfigError(f"{path}: [env] must be a table of STRATA_* variables")
    env: dict[str, str] = {}
    readable = env_variables()
    for name, raw in file_env.items():
        if not name.startswith("STRATA_"):
            raise ConfigError(f"{path}: [env] {name}: only STRATA_* variables belong there")
        owner = next((o for o in options if o.env == name), None)
        if owner is not None:
            raise ConfigError(f"{path}: [env] {name}: not read from the file's [env] table; set "
                              f"`{owner.key} = ...` at the top of the file instead")
        if name not in readable:
            raise ConfigError(f"{path}: [env] {name}: not one of the variables the [env] table sets"
                              f"{_did_you_mean(name, readable)}: the slot policy's {SLOT_VARIABLE_PREFIX}* "
                              f"(docs/slot-policy.md) and STRATA_RESTORE_LADDER; remove it from [env] (any other "
                              "STRATA_* variable is read from the environment of the process that uses it, never "
                              "from this file: set it in the environment there)")
        if isinstance(raw, (dict, list)):
            raise ConfigError(f"{path}: [env] {name}: expected a number or string, got {raw!r}")
        env[name] = str(raw).lower() if isinstance(raw, bool) else str(raw)
    from_file = frozenset(k for k in env if k not in environ)
    env.update({k: v for k, v in environ.items() if k.startswith("STRATA_")})

    by_key: dict[str, Option] = {}
    for opt in options:
        for name in opt.names():
            by_key[name.replace("-", "_")] = opt
    unknown = sorted(k for k in table if k not in by_key)
    if unknown:
        named = ", ".join(k + _unknown_key_hint(k, by_key) for k in unknown)
        raise ConfigError(f"{path}: unknown key(s): {named} (docs/configuration.md lists every key)")
    unknown_flags = sorted(k for k in flags if k not in by_key)
    if unknown_flags:
        raise ConfigError(f"unknown option(s): {', '.join(unknown_flags)}")

    values: dict[str, Any] = {}
    given: set[str] = set()     # the keys the command line set
    filed: set[str] = set()     # the keys the file set
    for opt in options:
        chosen = _pick(opt, flags, lambda name: f"--{name}")
        if chosen is not None:
            given.add(opt.key)
        if chosen is None and opt.env and environ.get(opt.env):
            chosen = opt.convert(environ[opt.env], opt.env)
        if chosen is None:
            try:
                chosen = _pick(opt, table, lambda name: f"{path}: {name.replace('-', '_')}")
            except ConfigError as e:   # the first bad value stops here; setup --show lists them all
                raise ConfigError(f"{e} (`strata setup --show` lists every key of the file and what is wrong "
                                  f"with each)") from None
            if chosen is not None:
                filed.add(opt.key)
        # a folder or file to write: a leading ~ is home, as the shell makes it of a flag (--model resolves its own)
        if isinstance(chosen, str) and names_a_written_path(opt.key):
            chosen = os.path.expanduser(chosen)   # "~/strata-cold" in a file made a folder named '~' in the cwd
        values[opt.key] = opt.default if chosen is None else chosen
    if "ctx" in given and "slot_ctx" not in given and values["slot_ctx"] and values["slot_ctx"] > values["ctx"]:
        # the file's slot_ctx (`strata setup` writes it as large as its ctx) shrinks with a --ctx given below it:
        # `strata serve --ctx 4096` was refused for a `--slot-ctx 8192` its user never typed
        values["slot_ctx"] = values["ctx"]
    _check_combinations(values)
    return ServerConfig(values=values, env=env, config_path=str(path) if path else None, env_from_file=from_file,
                        keys_from_file=frozenset(filed))


SLOT_VARIABLE_PREFIX = "STRATA_SLOT_"   # the slot policy's namespace: every name in it is one of its thresholds


def env_variables() -> frozenset[str]:
    """The `STRATA_*` variables the server's policies read from `ServerConfig.env` (the file's [env] table
    and the environment): the slot policy's thresholds and the conversation cache's variables."""
    from strata.server import slot_policy

    names = {*slot_policy.ENV_NAMES.values(), *slot_policy.LEARN_ENV_NAMES.values()}
    try:
        cache_options = importlib.import_module("strata.server.cache.options")
    except ImportError:
        cache_options = None
    if cache_options is not None:
        names.add(cache_options.ENV_RESTORE_LADDER)
    return frozenset(names)


# llama.cpp's long flags as TOML keys ("ctx_size" -> "ctx"), for the hint on an unknown key
KEY_SYNONYMS: dict[str, str] = {
    name[2:].replace("-", "_"): meant.split()[0][2:].replace("-", "_")
    for name, meant in FLAG_SYNONYMS.items() if name.startswith("--")
}


# ...and llama.cpp's flags with no counterpart here, as keys ("flash_attn": why it is not needed)
KEY_REASONS: dict[str, str] = {
    name[2:].replace("-", "_"): why for name, why in FLAG_REASONS.items() if name.startswith("--")
}


def _unknown_key_hint(key: str, known: Any) -> str:
    return f" ({KEY_REASONS[key]})" if key in KEY_REASONS else _did_you_mean(key, known, KEY_SYNONYMS)


def _did_you_mean(name: str, known: Any, synonyms: Mapping[str, str] | None = None) -> str:
    meant = name_meant(name, known, synonyms, cutoff=0.75)
    return f" (did you mean {meant}?)" if meant else ""


def _pick(opt: Option, source: Mapping[str, Any], label: Any) -> Any:
    """The option's value in one source, accepting any alias; two aliases with different values is an error."""
    found: dict[str, Any] = {}
    for name in opt.names():
        key = name.replace("-", "_")
        if key in source and source[key] is not None:
            shown = label(name)
            found[shown] = opt.convert(source[key], shown)
    if len({repr(v) for v in found.values()}) > 1:
        detail = ", ".join(f"{k}={v!r}" for k, v in found.items())
        raise ConfigError(f"aliases set to different values: {detail}")
    return next(iter(found.values()), None)


def _check_combinations(values: dict[str, Any]) -> None:
    if values["batch"] and values["batch_groups"] > values["batch"]:
        raise ConfigError(f"--batch-groups {values['batch_groups']} is more than --batch {values['batch']}")
    if values["slot_ctx"] and values["slot_ctx"] > values["ctx"]:
        raise ConfigError(f"--slot-ctx {values['slot_ctx']} is larger than --ctx {values['ctx']}")


def validate(config: ServerConfig) -> None:
    """Every part's settings checked before anything starts; raises ConfigError naming the bad one."""
    from strata.server import slot_policy

    readable = env_variables()
    for name in sorted(config.env):     # a misspelt threshold would otherwise be ignored without a word
        if name.startswith(SLOT_VARIABLE_PREFIX) and name not in readable:
            raise ConfigError(f"{name}: not a variable `strata serve` reads{_did_you_mean(name, readable)}; "
                              f"unset it (docs/slot-policy.md lists the {SLOT_VARIABLE_PREFIX}* variables)")
    try:
        slot_policy.PolicyConfig.from_env(config.env)
    except ValueError as e:
        raise ConfigError(_where_set(str(e), config)) from None
    try:
        from strata.server.cache import CacheConfig
    except ImportError:
        return
    try:
        cache_config = CacheConfig.from_values(config.values, environ=config.env)
        from strata.server.cache.sizeless_folders import check_sizeless_folders
        check_sizeless_folders(cache_config)   # a folder under /proc or /sys set by hand: refused as a bad flag
    except ValueError as e:
        raise ConfigError(_where_set(str(e), config)) from None


def _where_set(message: str, config: ServerConfig) -> str:
    """`message` with where the variable it names was set when that was the file's [env] table: a user who
    never set STRATA_SLOT_TTL_MAX_S in a shell looked for it there in vain."""
    named = [name for name in sorted(config.env_from_file) if re.search(rf"\b{name}\b", message)]
    if not named or not config.config_path:
        return message
    return f"{message} (set in the [env] table of {config.config_path})"


def file_problems(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """Why `strata serve --config PATH` would refuse this file (empty: it would start), each problem naming
    its key. Every key is checked on its own first, so all bad keys are listed; then the file as a whole
    goes through `load_config` and `validate`, exactly as serve does (combinations, policy, cache)."""
    path = Path(path)
    try:
        table = _read_toml(path)
    except ConfigError as e:
        return [str(e)]
    by_key = {name.replace("-", "_"): opt for opt in all_options() for name in opt.names()}
    problems: list[str] = []
    for key, raw in table.items():
        if key == "env":
            continue
        opt = by_key.get(key)
        if opt is None:
            problems.append(f"{key}: unknown key" + _unknown_key_hint(key, by_key))   # as serve says
            continue
        try:
            opt.convert(raw, key)
        except ConfigError as e:
            problems.append(str(e))
    if problems:
        return problems
    try:
        validate(load_config({}, config_path=path, environ={} if environ is None else environ))
    except ConfigError as e:
        problems.append(str(e).replace(f"{path}: ", ""))
    return problems


def config_from_args(args: argparse.Namespace, options: tuple[Option, ...] | None = None,
                     environ: Mapping[str, str] | None = None) -> ServerConfig:
    """The `strata serve` namespace (flags stored as `flag__<key>`) merged with its --config file."""
    flags = {k[len("flag__"):]: v for k, v in vars(args).items() if k.startswith("flag__")}
    if getattr(args, "no_config", False) and getattr(args, "config", None):
        # both: --config's file was read and --no-config said nothing (docs: "--no-config ignores it")
        raise ConfigError(f"--no-config with --config {args.config}: --no-config skips the file strata serve would "
                          "find itself ($STRATA_CONFIG, else the one `strata setup` wrote), --config names one to "
                          "read; give one of them")
    return load_config(flags, config_path=getattr(args, "config", None), environ=environ,
                       use_default_file=not getattr(args, "no_config", False), options=options)
