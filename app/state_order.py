"""The order of the server's states as the app shows them: one machine, so a later state is never overwritten by an
earlier event. The supervisor's threads (the worker's health checks, the output pump, the stop) each set the state;
a check of the state and the set after it were two steps, and a stop asked while the model loaded (or a restart's
new server loaded) could show "loading" or "running" after "stopping", or the old server's "stopping: keeping ..."
line after the new one's "starting".

Pure: the supervisor (mechanism) holds a Shown under its lock and asks `takes` before each change. Each start of the
server's supervision is a new `life`; an event about another life is refused. Within a life the rank never falls:
the run's states, then "stopping", then "stopped"; once the stop is asked, the run's states are refused even before
"stopping" is shown (a stop of a server not running goes straight to "stopped").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

RUN_STATES = ("waiting", "starting", "running", "restarting", "failed")
RANK = {**dict.fromkeys(RUN_STATES, 0), "stopping": 1, "stopped": 2}


@dataclass(frozen=True)
class Shown:
    life: int              # which start of the supervision this is about (0: none yet)
    state: str
    detail: str
    stop_asked: bool = False


def _known(state: str) -> str:
    if state not in RANK:
        raise ValueError(f"unknown server state {state!r}; one of {', '.join(RANK)}")
    return state


def takes(shown: Shown, life: int, state: str, *, progress: bool = False) -> bool:
    """Whether an event of `life` setting `state` replaces `shown`. `progress`: the server's own line about its stop,
    which only updates a "stopping" already shown (a server may say it stops before the app asked)."""
    rank = RANK[_known(state)]
    if life != shown.life:
        return False
    if progress:
        return state == "stopping" and shown.state == "stopping"
    floor = RANK["stopping"] if shown.stop_asked else 0
    return rank >= max(floor, RANK[shown.state])


def begin(shown: Shown, detail: str) -> Shown:
    """A start of the supervision: a new life, "starting"."""
    return Shown(shown.life + 1, "starting", detail)


def ask_stop(shown: Shown) -> Shown:
    """The stop is asked: from now on only "stopping" and "stopped" are taken in this life."""
    return replace(shown, stop_asked=True)
