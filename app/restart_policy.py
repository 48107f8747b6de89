"""When the app restarts its server process: a pure decision with a reason.

Frozen inputs, a `RestartDecision` out; no I/O, no clock reads (`ran_s` is passed in). The only
threshold is `max_retries` (`STRATA_START_RETRIES`, default 5): that many restarts in a row
without the server staying up for `stable_s` seconds, then the app gives up and says why.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from strata.exit_status import CONFIGURATION_REFUSED, MODEL_NOT_LOADED

DEFAULT_START_RETRIES = 5
DEFAULT_STABLE_S = 60.0     # a server up this long counts as started; the retry count starts again


@dataclass(frozen=True)
class RestartConfig:
    max_retries: int = DEFAULT_START_RETRIES
    stable_s: float = DEFAULT_STABLE_S

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"STRATA_START_RETRIES must be >= 0, got {self.max_retries!r}")
        if not self.stable_s > 0:
            raise ValueError(f"stable_s must be > 0, got {self.stable_s!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RestartConfig:
        env = os.environ if environ is None else environ
        raw = env.get("STRATA_START_RETRIES", "").strip()
        if not raw:
            return cls()
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"STRATA_START_RETRIES must be a whole number, got {raw!r}") from None
        return cls(max_retries=n)


@dataclass(frozen=True)
class Exit:
    """How the server process ended."""

    returncode: int          # negative: killed by that signal (POSIX)
    ran_s: float             # seconds it ran
    was_healthy: bool        # it answered /health at least once
    requested: bool          # the app (or the user through it) asked it to stop
    last_line: str = ""      # the last line it wrote, for the reason


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    attempts: int            # restarts in a row after this decision
    reason: str


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with status {returncode}"


def decide(exit: Exit, attempts: int, cfg: RestartConfig) -> RestartDecision:
    """`attempts`: restarts in a row so far (without a stable run in between)."""
    what = describe_exit(exit.returncode)
    if exit.last_line and exit.returncode > 0:     # a signal's victim has nothing to say about it
        what += f" ({exit.last_line})"
    if exit.requested:
        return RestartDecision(False, 0, f"stopped on request ({what})")
    if exit.was_healthy and exit.ran_s >= cfg.stable_s:
        attempts = 0          # it had been running fine: this is a new failure, not a crash loop
    if exit.returncode == CONFIGURATION_REFUSED and not exit.was_healthy:
        return RestartDecision(False, attempts, f"the server refused its configuration: {what}; "
                                                "fix the configuration file (or run the setup again)")
    if exit.returncode == MODEL_NOT_LOADED and not exit.was_healthy:   # the same file fails the same way again
        return RestartDecision(False, attempts, f"the server could not load its model: {what}; "
                                                "fix what it says, or choose another model (run the setup again)")
    if attempts >= cfg.max_retries:
        restarts = "1 restart" if attempts == 1 else f"{attempts} restarts"
        return RestartDecision(False, attempts, f"gave up after {restarts} in a row: server {what} "
                                                f"(STRATA_START_RETRIES={cfg.max_retries})")
    return RestartDecision(True, attempts + 1, f"server {what}; restart {attempts + 1} of {cfg.max_retries}")
