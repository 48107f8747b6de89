"""The conversation cache's option table and its validated, frozen `CacheConfig`.

What this is: the one place the cache's flags, their defaults (seed 002), aliases and validation
live. `server/config.py` merges `OPTIONS` with the server's own table (see docs/internals.md,
"Configuration"), then calls `CacheConfig.from_values`. What this is not: a parser; it reads no
file and no command line itself. The environment is read once, in `from_values`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strata import folders


class CacheConfigError(ValueError):
    """A bad cache option; the message names the flag (or variable) and the value."""


@dataclass(frozen=True)
class OptionSpec:
    """One option: `name` is the long flag without dashes' prefix (`conversation-cache-mib`).

    `type` is the Python type of the value (int, float, str, bool); `choices` limits a str;
    `aliases` are other flag names for the same field; `validator(value)` returns an error text or
    None. The TOML key is the name with `-` -> `_`.
    """

    name: str
    type: type
    default: Any
    help: str
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] | None = None
    validator: Callable[[Any], str | None] | None = None

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")

    @property
    def flags(self) -> tuple[str, ...]:
        return ("--" + self.name,) + tuple("--" + a for a in self.aliases)


def _non_negative(value: Any) -> str | None:
    return None if value >= 0 else f"must be >= 0, got {value!r}"


def default_cache_root() -> str:
    """The platform cache folder for Strata (strata/folders.py)."""
    return str(folders.cache_dir())


def default_cold_dir() -> str:
    return os.path.join(default_cache_root(), "conversations")


OPTIONS: list[OptionSpec] = [
    OptionSpec("conversation-cache-mib", int, 8192,
               "RAM level budget in MiB for parked conversation states (0 = RAM level off).",
               validator=_non_negative),
    OptionSpec("conversation-cache-warm-dir", str, "",
               "Warm disk level folder (a fast drive); empty = warm level off."),
    OptionSpec("conversation-cache-warm-mib", int, 0,
               "Warm disk level budget in MiB (0 = warm level off).", validator=_non_negative),
    OptionSpec("conversation-cache-cold-dir", str, "",
               "Cold disk level folder; empty = the platform cache folder's 'conversations'.",
               aliases=("conversation-cache-spill-dir",)),
    OptionSpec("conversation-cache-cold-mib", int, 0,
               "Cold disk level budget in MiB (0 = cold level off). The last level: only it deletes. A disk level "
               "keeps the conversations across a restart (without one, a stop loses them).",
               aliases=("conversation-cache-disk-mib",), validator=_non_negative),
    OptionSpec("conversation-cache-ram-max-age-s", float, 0.0,
               "Age limit of the RAM level in seconds (0 = none); older entries degrade.",
               validator=_non_negative),
    OptionSpec("conversation-cache-warm-max-age-s", float, 0.0,
               "Age limit of the warm level in seconds (0 = none); older entries degrade.",
               validator=_non_negative),
    OptionSpec("conversation-cache-cold-max-age-s", float, 0.0,
               "Age limit of the cold level in seconds (0 = none); older entries are deleted.",
               validator=_non_negative),
    OptionSpec("conversation-cache-park", str, "ram",
               "Parking target: ram (keep in RAM), disk (spill, free the RAM copy), auto (chosen at start-up).",
               choices=("ram", "disk", "auto")),
    OptionSpec("conversation-cache-min-free-mib", int, 2560,
               "Parking floor: RAM a capture that stays in RAM must leave available.",
               validator=_non_negative),
    OptionSpec("conversation-cache-park-min-free-mib", int, 512,
               "Transient floor: RAM a disk-bound capture, disk hit or session save/restore must leave.",
               validator=_non_negative),
    OptionSpec("conversation-cache-when-full", str, "evict",
               "When the last level is full: evict its oldest entries, or reject the newcomer.",
               choices=("evict", "reject")),
    OptionSpec("conversation-cache-segment-mib", int, 0,
               "Segment tier budget in MiB (0 = off): states at message openers, shared by content.",
               validator=_non_negative),
    OptionSpec("conversation-cache-segment-dir", str, "",
               "Segment tier folder; empty = 'segments' beside the cold level's folder."),
    OptionSpec("conversation-cache-system-prompt-mib", int, 0,
               "System-prompt cache budget in MiB (0 = off): state of system prompt plus tools.",
               validator=_non_negative),
    OptionSpec("conversation-cache-system-prompt-dir", str, "",
               "System-prompt cache folder; empty = the platform cache folder's 'system-prompts'."),
    OptionSpec("conversation-cache-sessions-dir", str, "",
               "Saved sessions folder (session API); empty = the platform cache folder's 'sessions'."),
    OptionSpec("conversation-cache-sessions-mib", int, 0,
               "Saved sessions folder budget in MiB (0 = no limit): a save that would take the folder past it is "
               "refused, or makes room per --conversation-cache-sessions-when-full.", validator=_non_negative),
    OptionSpec("conversation-cache-sessions-when-full", str, "reject",
               "When a save would take the sessions folder past its budget: reject it (the saves stay), or evict "
               "this model's least recently used saves (saved or restored longest ago) to make room.",
               choices=("reject", "evict")),
]

OPTIONS_BY_FIELD: dict[str, OptionSpec] = {o.field: o for o in OPTIONS}
_FIELD_OF_NAME: dict[str, str] = {}
for _o in OPTIONS:
    for _n in (_o.name, *_o.aliases):
        _FIELD_OF_NAME[_n.replace("-", "_")] = _o.field

ENV_RESTORE_LADDER = "STRATA_RESTORE_LADDER"


# (what, its folder's field, its budget's field): the stores a folder alone does not turn on
_FOLDER_AND_BUDGET = (("warm level", "conversation_cache_warm_dir", "conversation_cache_warm_mib"),
                      ("cold level", "conversation_cache_cold_dir", "conversation_cache_cold_mib"),
                      ("segment tier", "conversation_cache_segment_dir", "conversation_cache_segment_mib"),
                      ("system-prompt cache", "conversation_cache_system_prompt_dir",
                       "conversation_cache_system_prompt_mib"))


def folders_without_budget(values: Mapping[str, Any]) -> list[str]:
    """A warning for each store given a folder but no budget (values keyed by field, as the server's merged
    configuration has them): a budget is what turns a store on, so it keeps nothing there, which whoever set
    the folder did not mean (the stop then says no disk level was on)."""
    warnings = []
    for what, dir_field, mib_field in _FOLDER_AND_BUDGET:
        folder, mib = values.get(dir_field), values.get(mib_field)
        if folder and not mib:
            warnings.append(f"conversation cache: the {what}'s folder is set ({folder}) but not its budget "
                            f"(--{mib_field.replace('_', '-')} is 0), so the {what} is off and keeps nothing; "
                            f"give it a budget in MiB")
    return warnings


def _parse_env_bool(environ: Mapping[str, str], name: str, default: bool) -> bool:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    low = raw.strip().lower()
    if low in ("1", "true", "on", "yes"):
        return True
    if low in ("0", "false", "off", "no"):
        return False
    raise CacheConfigError(f"{name}={raw!r}: expected 1/0, on/off, true/false or yes/no")


def _coerce(spec: OptionSpec, used_name: str, value: Any) -> Any:
    flag = "--" + used_name.replace("_", "-")
    try:
        if spec.type is bool and isinstance(value, str):
            value = _parse_env_bool({flag: value}, flag, spec.default)
        elif spec.type is int and isinstance(value, float) and not value.is_integer():
            raise ValueError
        elif spec.type is int and isinstance(value, bool):
            raise ValueError
        else:
            value = spec.type(value)
    except (TypeError, ValueError):
        raise CacheConfigError(f"{flag}: expected {spec.type.__name__}, got {value!r}") from None
    if spec.choices is not None and value not in spec.choices:
        raise CacheConfigError(f"{flag}: expected one of {', '.join(spec.choices)}, got {value!r}")
    if spec.validator is not None:
        problem = spec.validator(value)
        if problem:
            raise CacheConfigError(f"{flag}: {problem}")
    return value


@dataclass(frozen=True)
class LevelConfig:
    """One level of the cascade. A disk level is on with a folder and a non-zero budget."""

    name: str  # "ram" | "warm" | "cold"
    folder: str  # "" for RAM
    budget_mib: int
    max_age_s: float  # 0 = no age limit

    @property
    def on(self) -> bool:
        return self.budget_mib > 0 and (self.name == "ram" or bool(self.folder))

    @property
    def budget_bytes(self) -> int:
        return self.budget_mib * 1024 * 1024


@dataclass(frozen=True)
class CacheConfig:
    """Everything the cache reads from configuration; build with `from_values`."""

    conversation_cache_mib: int = 8192
    conversation_cache_warm_dir: str = ""
    conversation_cache_warm_mib: int = 0
    conversation_cache_cold_dir: str = field(default_factory=default_cold_dir)
    conversation_cache_cold_mib: int = 0
    conversation_cache_ram_max_age_s: float = 0.0
    conversation_cache_warm_max_age_s: float = 0.0
    conversation_cache_cold_max_age_s: float = 0.0
    conversation_cache_park: str = "ram"
    conversation_cache_min_free_mib: int = 2560
    conversation_cache_park_min_free_mib: int = 512
    conversation_cache_when_full: str = "evict"
    conversation_cache_segment_mib: int = 0
    conversation_cache_segment_dir: str = ""
    conversation_cache_system_prompt_mib: int = 0
    conversation_cache_system_prompt_dir: str = ""
    conversation_cache_sessions_dir: str = ""
    conversation_cache_sessions_mib: int = 0
    conversation_cache_sessions_when_full: str = "reject"
    restore_ladder: bool = True  # STRATA_RESTORE_LADDER

    def __post_init__(self) -> None:
        for spec in OPTIONS:
            _coerce(spec, spec.field, getattr(self, spec.field))

    @classmethod
    def from_values(cls, values: Mapping[str, Any] | None = None,
                    environ: Mapping[str, str] | None = None) -> CacheConfig:
        """Validate `values` keyed by flag name (dashes or underscores, aliases allowed).

        Unknown keys are ignored (the server's table owns them); two names of one field with
        different values raise `CacheConfigError` naming both flags.
        """
        environ = os.environ if environ is None else environ
        chosen: dict[str, tuple[str, Any]] = {}
        for raw_name, raw_value in (values or {}).items():
            name = raw_name.lstrip("-").replace("-", "_")
            fld = _FIELD_OF_NAME.get(name)
            if fld is None or raw_value is None:
                continue
            spec = OPTIONS_BY_FIELD[fld]
            value = _coerce(spec, name, raw_value)
            if fld in chosen and chosen[fld][1] != value:
                other, other_value = chosen[fld]
                raise CacheConfigError(
                    f"--{other.replace('_', '-')}={other_value!r} and --{name.replace('_', '-')}={value!r} "
                    f"set the same field to different values; keep one")
            chosen[fld] = (name, value)
        kwargs = {fld: v for fld, (_, v) in chosen.items()}
        if not kwargs.get("conversation_cache_cold_dir"):
            kwargs["conversation_cache_cold_dir"] = default_cold_dir()
        kwargs["restore_ladder"] = _parse_env_bool(environ, ENV_RESTORE_LADDER, True)
        config = cls(**kwargs)
        config.check_folders()
        return config

    def store_folders(self) -> list[tuple[str, str, int]]:
        """(flag, folder, MiB) of each store kept in a folder: warm, cold, segments, system prompts."""
        return [("--conversation-cache-warm-dir", self.conversation_cache_warm_dir, self.conversation_cache_warm_mib),
                ("--conversation-cache-cold-dir", self.conversation_cache_cold_dir, self.conversation_cache_cold_mib),
                ("--conversation-cache-segment-dir", self.segment_dir, self.conversation_cache_segment_mib),
                ("--conversation-cache-system-prompt-dir", self.system_prompt_dir,
                 self.conversation_cache_system_prompt_mib)]

    def check_folders(self) -> None:
        """Two stores that are on may not share a folder (each indexes and evicts the other's files):
        raises `CacheConfigError` naming both flags, before the server listens."""
        seen: dict[str, str] = {}
        for flag, folder, mib in self.store_folders():
            if not folder or mib <= 0:
                continue
            real = os.path.realpath(os.path.expanduser(folder))
            if real in seen:
                raise CacheConfigError(f"{seen[real]} and {flag} name the same folder {folder!r}; give each its own")
            seen[real] = flag

    # -- derived views -------------------------------------------------------------------------

    @property
    def levels(self) -> tuple[LevelConfig, ...]:
        """All three levels in cascade order, on or off."""
        return (
            LevelConfig("ram", "", self.conversation_cache_mib, self.conversation_cache_ram_max_age_s),
            LevelConfig("warm", self.conversation_cache_warm_dir, self.conversation_cache_warm_mib,
                        self.conversation_cache_warm_max_age_s),
            LevelConfig("cold", self.conversation_cache_cold_dir, self.conversation_cache_cold_mib,
                        self.conversation_cache_cold_max_age_s),
        )

    @property
    def segment_dir(self) -> str:
        if self.conversation_cache_segment_dir:
            return self.conversation_cache_segment_dir
        return os.path.join(os.path.dirname(os.path.abspath(self.conversation_cache_cold_dir)), "segments")

    @property
    def system_prompt_dir(self) -> str:
        return self.conversation_cache_system_prompt_dir or os.path.join(default_cache_root(), "system-prompts")

    @property
    def sessions_dir(self) -> str:
        return self.conversation_cache_sessions_dir or os.path.join(default_cache_root(), "sessions")
