"""A named session an older Strata saved, rebuilt: its token ids read again into a context, as a request's
prompt is read, so that this engine computes their KV (the older image was computed differently and is
never restored: server/cache/disk.py `kv_revision`).

What this is: the reading, on the scheduler's worker thread inside the restore's Scheduler.call, in pieces of
the prompt chunk (Scheduler.read_piece: a stop waits for the piece under way by the measured prefill rate,
saying so, and no piece starts once it came). What this is not: deciding that a session needs it or writing it
back (server/cache/sessions.py, server/sessions_backend.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from strata.server.errors import APIError


class SessionTooLongError(ValueError):
    """The session holds more tokens than the context it is to be rebuilt in (a 400)."""


@dataclass(frozen=True)
class Rebuilt:
    n_tokens: int      # tokens the context holds, all of the session's
    seconds: float     # the reading's


def check_fits(name: str, n_tokens: int, capacity: int, ctx_name: str) -> None:
    """Refuse before anything is touched when the session cannot be read whole into the context: an older
    session's KV is read again from its tokens, and a prefix of it would not be the session saved."""
    if n_tokens > capacity:
        raise SessionTooLongError(
            f"session {name!r} holds {n_tokens} tokens (saved by an older Strata, so it is read again from its "
            f"tokens), more than context {ctx_name} holds ({capacity}): restore it into a larger context")


def read_again(sched: Any, ctx: int, tokens: list[int]) -> Rebuilt:
    """Empty context `ctx` and read `tokens` into it piece by piece (worker thread). A stop between pieces ends it
    with the 503 a request then gets; a stop or an engine error leaves the context empty and unlabelled (reset)."""
    t0 = time.monotonic()
    sched.engine.truncate(ctx, 0)
    sched.table.set_tokens(ctx, [])
    pos = 0
    try:
        while pos < len(tokens):
            if sched.stopping:
                raise APIError(503, "the server is stopping", headers={"Retry-After": "5"})
            part = tokens[pos: pos + sched.chunk]
            sched.read_piece(ctx, part)
            pos += len(part)
    except BaseException:
        reset(sched, ctx)
        raise
    return Rebuilt(pos, time.monotonic() - t0)


def reset(sched: Any, ctx: int) -> None:
    """A rebuild that did not finish: its prefix of the session is not the session, and the context's label
    still names the history parked away before it. Kept, the prefix was parked at the stop as a conversation
    (a cache entry of a history nobody had), and after an engine error inside a piece the engine held more than
    the slot table's mirror, which a request continuing the mirror's tokens then read on top of (wrong KV).
    Emptied here, the engine and the mirror agree on nothing; an engine that cannot even truncate leaves the
    context invalid (the next request there starts from nothing)."""
    try:
        sched.engine.truncate(ctx, 0)
        sched.table.set_tokens(ctx, [])
        sched.table[ctx].conversation = ""
    except Exception:
        sched.table.invalidate(ctx)
