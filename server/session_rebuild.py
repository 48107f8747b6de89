"""A named session an older Strata saved, rebuilt: its token ids read again into a context, as a request's
prompt is read, so that this engine computes their KV (the older image was computed differently and is
never restored: server/cache/disk.py `kv_revision`).

What this is: the reading, on the scheduler's worker thread, one piece of the prompt chunk a Scheduler.call
(Scheduler.read_piece: a stop waits for the piece under way by the measured prefill rate, saying so, and no
piece starts once it came), other requests' steps running between the pieces. What this is not: deciding that a session needs it or writing it
back (server/cache/sessions.py, server/sessions_backend.py).
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable
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


HELD = -1    # the busy_job of a context a rebuild holds between its pieces (no request's id)


class Rebuild:
    """Reads `tokens` into context `ctx` one prompt piece a Scheduler.call, so that other requests' steps run
    between the pieces. Between them the context is held: busy (no request is placed there) and not valid (a
    stop parks nothing of it, a request copies nothing from it). `finish(Rebuilt)` runs on the worker after the
    last piece, the context released and valid; its result is `done`'s. A stop (the piece under way is waited
    for, no other starts: the next call is refused) or an engine error ends it with the context reset, `done`
    failing with that error. Every method runs on the worker thread: a call the scheduler refuses fails its
    future, and so runs its callback, there (at once inside `call`, or at the worker's end)."""

    def __init__(self, sched: Any, ctx: int, tokens: list[int], finish: Callable[[Rebuilt], Any]) -> None:
        self.sched, self.ctx, self.tokens, self.finish = sched, ctx, tokens, finish
        self.pos = 0
        self.t0 = time.monotonic()
        self.done: concurrent.futures.Future = concurrent.futures.Future()
        self.done.set_running_or_notify_cancel()    # a waiter giving up cannot cancel it: it carries on

    def start(self) -> concurrent.futures.Future:
        """Empty and hold the context, queue the first piece (inside the restore's call)."""
        sched, state = self.sched, self.sched.table[self.ctx]
        sched.engine.truncate(self.ctx, 0)
        sched.table.set_tokens(self.ctx, [])
        state.busy_job, state.phase, state.valid = HELD, "prefill", False
        self._next()
        return self.done

    def _next(self) -> None:
        self.sched.call(self._piece).add_done_callback(self._refused)

    def _refused(self, fut: concurrent.futures.Future) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if exc is not None:              # the scheduler's stop refused the next piece
            self._fail(exc)

    def _piece(self) -> None:
        try:
            if self.sched.stopping:
                raise APIError(503, "the server is stopping", headers={"Retry-After": "5"})
            # while others generate, a piece is their time slice (--prefill-slice-ms), as a prompt's is: a whole
            # chunk held every stream for a chunk's reading a piece
            part = self.tokens[self.pos: self.pos + self.sched.slice_tokens()]
            self.sched.read_piece(self.ctx, part)
            self.pos += len(part)
            if self.pos < len(self.tokens):
                self._next()
                return
            state = self.sched.table[self.ctx]
            state.busy_job, state.phase, state.valid = None, "idle", True
            self.done.set_result(self.finish(Rebuilt(self.pos, time.monotonic() - self.t0)))
        except BaseException as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        reset(self.sched, self.ctx)
        if not self.done.done():
            self.done.set_exception(exc)


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
    state = sched.table[ctx]
    state.busy_job, state.phase = None, "idle"
