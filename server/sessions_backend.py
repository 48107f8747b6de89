"""The session endpoints' backend (`server/cache/http.py` calls it): the conversation cache's session
operations run on the scheduler's worker thread, on a context no request is using, and the slot table
learns what a restore put into the context. A session an older Strata saved is rebuilt there instead: its
tokens read again (session_rebuild.py), then saved again under its name with this engine's KV. Mechanism only;
the cache does the saving and restoring.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass
from typing import Any

from strata.server import session_rebuild
from strata.server.cache.sessions import SessionConflictError, hold_unless_given_up
from strata.server.errors import APIError
from strata.server.slots import MAIN

# A call is given up only once the worker has read no prompt piece and ended no call for this long: a rebuild
# of 128K tokens on a slow CPU takes longer than any fixed limit, and each of its pieces is progress.
WAIT_S = 600.0
POLL_S = 0.5


@dataclass(frozen=True)
class RebuiltSession:
    """A restore that read an older Strata's session again from its tokens (the answer's `rebuilt`)."""

    n_tokens: int
    seconds: float
    save_error: str | None    # None: saved again under its name with this engine's KV


@dataclass(eq=False)
class _Pending:
    """A restore under way (a rebuild reads for long): a DELETE of its name meanwhile keeps it from saving."""

    name: str
    deleted: bool = False


class SessionBackend:
    """Mounted before the model loads; refuses with a ValueError (a 400) until the cache exists."""

    def __init__(self, state: Any) -> None:
        self.state = state
        # the sessions being restored (rebuilt) and whether a DELETE came meanwhile (their save is then not made); the lock
        # also holds a DELETE while a rebuild's save writes, so one never lands between the check and the write
        self._rebuilding: list[_Pending] = []
        self._lock = threading.Lock()

    @property
    def scheduler(self) -> Any:
        if self.state.scheduler is None:
            raise ValueError("the model is still loading")
        return self.state.scheduler

    @property
    def cache(self) -> Any:
        if self.state.cache is None:
            raise ValueError("the conversation cache is off on this server")
        return self.state.cache

    def _context(self, ctx: int) -> Any:
        table = self.scheduler.table
        if not 0 <= ctx < len(table.contexts):
            raise IndexError(f"no context {ctx}: this server has main and {len(table.contexts) - 1} slot(s)")
        state = table[ctx]
        if state.busy_job is not None:
            what = "a session rebuild" if state.busy_job == session_rebuild.HELD else "a request"
            raise ValueError(f"context {'main' if ctx == MAIN else ctx} is running {what}; retry when it is idle")
        return state

    def save_session(self, name: str, ctx: int) -> dict:
        def run() -> dict:
            self._context(ctx)
            return self.cache.save_session(name, ctx)

        return self._wait(self.scheduler.call(run), f"save of session {name!r}")

    def restore_session(self, name: str, ctx: int) -> Any:
        pending = _Pending(name)

        def run() -> Any:
            with self._lock:
                self._rebuilding.append(pending)   # before the session is read: a DELETE from here on is seen
            try:
                out = restore()
            except BaseException:
                self._forget(pending)
                raise
            if isinstance(out, concurrent.futures.Future):   # a rebuild, read piece by piece from here
                out.add_done_callback(lambda _: self._forget(pending))
            else:
                self._forget(pending)
            return out

        def restore() -> Any:
            state = self._context(ctx)
            if not self.cache.has_session(name):
                # answered before the park below: a 404 changes nothing (parked, the history still held
                # there was marked parked, and once its cache entry went, overwriting it parked nothing)
                raise KeyError(self.cache.missing_session(name))
            tokens = self.cache.session_to_rebuild(name)
            if tokens is not None:   # refused before the park too: nothing is changed
                session_rebuild.check_fits(name, len(tokens), self.scheduler.engine.context_capacity(ctx),
                                           "main" if ctx == MAIN else str(ctx))
            # the history there goes to the conversation cache first, as a request's displacement does
            self.scheduler.park_to_cache(ctx, "overwritten by a session restore")
            if tokens is not None:
                return session_rebuild.Rebuild(self.scheduler, ctx, [int(t) for t in tokens],
                                               lambda done: self._rebuilt(pending, ctx, done)).start()
            result = self.cache.restore_session(name, ctx)
            self.scheduler.table.set_tokens(ctx, list(self.scheduler.engine.context_tokens(ctx)))
            state.conversation = f"session:{name}"
            return result

        what = f"restore of session {name!r}"
        out = self._wait(self.scheduler.call(run), what)
        return self._wait(out, what) if isinstance(out, concurrent.futures.Future) else out

    def _forget(self, pending: _Pending) -> None:
        with self._lock:
            self._rebuilding.remove(pending)

    def _wait(self, fut: concurrent.futures.Future, what: str) -> Any:
        """The call's result, waited for as long as the worker makes progress (a piece read, a call ended). Given
        up after WAIT_S without any: a call not begun is taken back (nothing was done), one under way is said to
        be (a 503: it carries on; not the 500 or 507 a TimeoutError, an OSError, made of it). Given up once a stop
        gave the call up as stuck and the cache has closed: this wait, on the event loop's executor, held the
        process's end for WAIT_S past a hung save (asyncio.run waits for its executor's threads)."""
        sched = self.scheduler
        seen, since = sched.pieces_read, time.monotonic()
        while True:
            done, _ = concurrent.futures.wait([fut], timeout=POLL_S)
            if done:
                return fut.result()
            if sched.gave_up and getattr(self.state.cache, "closed", False):
                # the stop gave this call up as stuck and the cache's close is done: a save it waited for has ended
                # (answered just below), else it was given up (a write that hangs): nothing more will come of it
                done, _ = concurrent.futures.wait([fut], timeout=1.0)
                if done:
                    return fut.result()
                raise APIError(503, f"the {what} did not end: the server stopped and gave it up as stuck",
                               headers={"Retry-After": "30"})
            now = time.monotonic()
            if sched.pieces_read != seen:
                seen, since = sched.pieces_read, now
            elif now - since >= WAIT_S:
                break
        if fut.cancel():
            raise APIError(503, f"the {what} did not begin: the server's worker read no prompt piece and ended no "
                           f"call for {WAIT_S:.0f} s; nothing was done, retry later", headers={"Retry-After": "30"})
        raise APIError(503, f"the {what} is still under way: the server's worker read no prompt piece for "
                       f"{WAIT_S:.0f} s; it carries on (GET /v1/sessions and /v1/slots say when it is done)",
                       headers={"Retry-After": "30"})

    def _rebuilt(self, pending: _Pending, ctx: int, done: session_rebuild.Rebuilt) -> RebuiltSession:
        """After an older Strata's session was read again from its tokens (worker thread): labelled, then saved
        under its name with this engine's KV (the next restore is a plain one), unless a DELETE came meanwhile. A
        save refused (RAM floor, a full or read-only folder) leaves the context rebuilt and the old files as they
        were; the answer says why."""
        name = pending.name
        self.scheduler.table[ctx].conversation = f"session:{name}"
        with self._lock:
            if pending.deleted:
                return RebuiltSession(done.n_tokens, done.seconds, f"session {name!r} was deleted while it was "
                                      "read again: the context holds it, it is not saved again")
            try:
                self.cache.save_session(name, ctx)
                saved_error = None
            except (MemoryError, OSError, ValueError, SessionConflictError) as exc:
                saved_error = f"{type(exc).__name__}: {exc}"
        return RebuiltSession(done.n_tokens, done.seconds, saved_error)

    def delete_session(self, name: str) -> bool:
        """Deletes at once, a session being rebuilt included: its rebuild then does not save it again (a DELETE
        during that save waits for it, then deletes what it wrote). The removal of its files is waited for outside
        the lock (a restore on the worker thread takes it: one that hangs held every request)."""
        cache = self.cache
        hold_unless_given_up(self._lock, lambda: getattr(cache, "saving", None))   # a rebuild's save holds it
        try:
            for pending in self._rebuilding:
                if pending.name == name:
                    pending.deleted = True
            removal = cache.start_delete(name)
        finally:
            self._lock.release()
        if removal is None:
            return False
        cache.wait_for_removal(removal)
        return True

    def list_sessions(self) -> list[dict]:
        return self.cache.list_sessions()
