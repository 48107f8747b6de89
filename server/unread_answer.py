"""When a streamed answer's client counts as gone for reading none of it (--answer-unread-s): a hung or
suspended agent, a laptop asleep across a network, keeps its connection open and reads nothing, and the
engine would write on for nobody to max_tokens (an agent's 32,000). A client that reads slowly, but reads,
is never ended: any byte it takes starts the count again.

Pure: what a look at the socket saw in, a `Reading` out; `now` is passed in. Not here: looking at the socket
(socket_queue.py) or ending the request (jobrun.JobEvents).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# the least bound but 0 (never): a look (every 0.25 s, jobrun.CLIENT_CHECK_S) that finds bytes just written
# still on their way to a reading client (a round trip on a network) sees nothing taken since the last look,
# so a bound at or below the look period would end clients that read
LEAST_S = 1.0


def bound_problem(limit_s: float) -> str | None:
    """What is wrong with --answer-unread-s `limit_s` (the option's validator), or None."""
    if 0 < limit_s < LEAST_S:
        return (f"{limit_s:g} s would end clients that are reading (their bytes on the way at a look read as "
                f"none taken): give 0 (never) or at least {LEAST_S:g} s")
    return None


@dataclass(frozen=True)
class Reading:
    """What the looks at a client's socket saw so far."""

    since: float    # when the client last took a byte, or had nothing waiting for it
    unsent: int     # bytes written for it that it has not taken (0: it took all)
    taken: int      # bytes of all written that it took (written less unsent: socket_queue.measure)


def first_look(now: float, unsent: int, taken: int) -> Reading:
    return Reading(since=now, unsent=unsent, taken=taken)


def look(prev: Reading, now: float, unsent: int, taken: int) -> Reading:
    """The next look. The client took something when nothing waits for it or when it took more bytes than
    at the last look; not when fewer bytes wait, which a slow reader behind a faster answer never shows."""
    moved = taken > prev.taken
    return Reading(since=now if unsent == 0 or moved else prev.since, unsent=unsent, taken=taken)


def gone_unread(r: Reading, now: float, limit_s: float) -> bool:
    """Whether bytes have waited for the client `limit_s` seconds without it taking one (0: never)."""
    if not math.isfinite(limit_s) or limit_s < 0:
        raise ValueError(f"limit_s must be a number of seconds >= 0 (0: never); got {limit_s!r}")
    return limit_s > 0 and r.unsent > 0 and now - r.since >= limit_s
