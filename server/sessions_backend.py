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

from strata.server import history_save, session_rebuild
from strata.server.cache.sessions import SessionConflictError, hold_unless_given_up
from strata.server.errors import APIError
from strata.server.slots import MAIN

# A call is given up only once the worker has read no prompt piece, written no piece of a session save and ended
# no call for this long: a rebuild of 128K tokens on a slow CPU, or a 12 GiB save to a slow disk, takes longer than
# any fixed limit, and each of its pieces is progress.
WAIT_S = 600.0
POLL_S = 0.5
# A save or restore into a context that runs a request (or a rebuild) waits this long for it to be idle, then is
# answered 503 with Retry-After (the context is busy for a moment, the request is not malformed). 30 s: an agent's
# turn on two cores streams for seconds to tens of seconds; the soak's restores into main found a turn running
# there in 30 of 61 cases. Meanwhile no request is placed in that context (Scheduler.call's idle_ctx).
SESSION_IDLE_WAIT_S = 30.0
IDLE_RETRY_AFTER_S = 5


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

    def __init__(self, state: Any, idle_wait_s: float = SESSION_IDLE_WAIT_S) -> None:
        if not idle_wait_s >= 0:
            raise ValueError(f"idle_wait_s must be a number of seconds >= 0, got {idle_wait_s!r}")
        self.state = state
        self.idle_wait_s = idle_wait_s
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
        if state.busy_job is not None:   # Scheduler.call(idle_ctx=ctx) runs the call only once it is idle
            raise RuntimeError(f"context {_ctx_name(ctx)} is running {_running(state)} inside a session call")
        return state

    def save_session(self, name: str, ctx: int | None, target: history_save.SaveTarget | None = None) -> dict:
        """Saves context `ctx`'s history; with `target`, the conversation it names (history_save.py): from `ctx`
        only if that still holds it (else a SlotTakenError, a 409), or, `ctx` None, from wherever it is now."""
        what = f"save of session {name!r}"
        if target is None:
            def run() -> dict:
                state = self._context(ctx)   # a completion's moved KV is not saved as if exact
                return {**self.cache.save_session(name, ctx, history_save.exact_tokens(state)),
                        "slot": "main" if ctx == MAIN else ctx}

            return self._wait(self.scheduler.call(run, idle_ctx=ctx), what, idle_ctx=ctx)
        cache, sched = self.cache, self.scheduler
        # rendered here, on the session call's thread: a long conversation's template work holds no step
        wanted = None if target.conversation is not None else history_save.wanted_of(sched.engine, target)
        if ctx is not None:
            def guarded() -> dict:
                self._context(ctx)
                return history_save.save_guarded(sched, cache, name, ctx, wanted, target.conversation)

            return self._wait(sched.call(guarded, idle_ctx=ctx), what, idle_ctx=ctx)

        def found() -> dict:
            if wanted is None:
                return history_save.save_by_key(sched, cache, name, target.conversation)
            return history_save.save_found(sched, cache, name, wanted)

        # runs at the next step, whatever runs: the history's tokens are compared there, and a context a request
        # goes on in keeps the prefix saved unchanged for the call's length (the worker runs no step meanwhile)
        return self._wait(sched.call(found), what)

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
                raise self.cache.missing_session_error(name)   # a 404, or a 409 naming the model that saved it
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
            _restored(state, name)
            return result

        what = f"restore of session {name!r}"
        out = self._wait(self.scheduler.call(run, idle_ctx=ctx), what, idle_ctx=ctx)
        return self._wait(out, what) if isinstance(out, concurrent.futures.Future) else out

    def _forget(self, pending: _Pending) -> None:
        with self._lock:
            self._rebuilding.remove(pending)

    def _wait(self, fut: concurrent.futures.Future, what: str, idle_ctx: int | None = None) -> Any:
        """The call's result, waited for as long as the worker makes progress (a piece read, a call ended). Given
        up after WAIT_S without any: a call not begun is taken back (nothing was done), one under way is said to
        be (a 503: it carries on; not the 500 or 507 a TimeoutError, an OSError, made of it). Given up once a stop
        gave the call up as stuck and the cache has closed: this wait, on the event loop's executor, held the
        process's end for WAIT_S past a hung save (asyncio.run waits for its executor's threads). A call that
        needs context `idle_ctx` idle (the worker holds it until then, no request placed there meanwhile) and has
        not begun after idle_wait_s while that context runs a request or a rebuild is taken back too: a 503 with
        Retry-After naming what the context runs."""
        sched = self.scheduler
        seen, since = self._progress(), time.monotonic()
        idle_deadline = since + self.idle_wait_s
        while True:
            done, _ = concurrent.futures.wait([fut], timeout=POLL_S)
            if done:
                return fut.result()
            if idle_ctx is not None and time.monotonic() >= idle_deadline:
                self._give_up_waiting_for_idle(fut, idle_ctx, what)
            if sched.gave_up and getattr(self.state.cache, "closed", False):
                # the stop gave this call up as stuck and the cache's close is done: a save it waited for has ended
                # (answered just below), else it was given up (a write that hangs): nothing more will come of it
                done, _ = concurrent.futures.wait([fut], timeout=1.0)
                if done:
                    return fut.result()
                raise APIError(503, f"the {what} did not end: the server stopped and gave it up as stuck",
                               headers={"Retry-After": "30"})
            now, moved = time.monotonic(), self._progress()
            if moved != seen:
                seen, since = moved, now
            elif now - since >= WAIT_S:
                break
        if fut.cancel():
            raise APIError(503, f"the {what} did not begin: the server's worker read no prompt piece, wrote no session "
                           f"piece and ended no call for {WAIT_S:.0f} s; nothing was done, retry later",
                           headers={"Retry-After": "30"})
        raise APIError(503, f"the {what} is still under way: the server's worker read no prompt piece and wrote no "
                       f"session piece for {WAIT_S:.0f} s; it carries on (GET /v1/sessions and /v1/slots say when it "
                       "is done)", headers={"Retry-After": "30"})

    def _progress(self) -> tuple[int, str | None, int]:
        """What changes while the worker moves: its prompt pieces read and calls ended, and the session save being
        written (its name, its image's bytes written so far). A save is one call: on a slow disk it wrote for longer
        than WAIT_S with no piece read, and was answered 503 while each of its pieces went on being written."""
        saving = getattr(self.state.cache, "saving", None)
        return (self.scheduler.pieces_read, saving.name if saving is not None else None,
                saving.written if saving is not None else 0)

    def _give_up_waiting_for_idle(self, fut: concurrent.futures.Future, ctx: int, what: str) -> None:
        """Raises the 503 when context `ctx` still runs a request or a rebuild and the call is taken back; a call
        not begun while the context is idle waits for the worker's step under way (_wait's rules)."""
        table = self.scheduler.table
        state = table[ctx] if 0 <= ctx < len(table.contexts) else None
        if state is not None and state.busy_job is not None and fut.cancel():
            raise APIError(503, f"the {what} waited {self.idle_wait_s:g} s for context {_ctx_name(ctx)} to be idle "
                           f"and it is still running {_running(state)}; nothing was done, retry later",
                           headers={"Retry-After": str(IDLE_RETRY_AFTER_S)})

    def _rebuilt(self, pending: _Pending, ctx: int, done: session_rebuild.Rebuilt) -> RebuiltSession:
        """After an older Strata's session was read again from its tokens (worker thread): labelled, then saved
        under its name with this engine's KV (the next restore is a plain one), unless a DELETE came meanwhile. A
        save refused (RAM floor, a full or read-only folder) leaves the context rebuilt and the old files as they
        were; the answer says why."""
        name = pending.name
        _restored(self.scheduler.table[ctx], name)
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


def _restored(state: Any, name: str) -> None:
    """Session `name` now held by context `state`: labelled, and its last use is the restore's (the client asked for
    it back to go on with it). The earlier occupant's last use, kept, made it look idle since long before (expired,
    the first a new conversation overwrote, its protection by length counted from then); none, the least recent."""
    state.conversation = f"session:{name}"
    state.last_use = time.monotonic()


def _ctx_name(ctx: int) -> str:
    return "main" if ctx == MAIN else str(ctx)


def _running(state: Any) -> str:
    """What a busy context runs, for a message."""
    return "a session rebuild" if state.busy_job == session_rebuild.HELD else f"a request (job {state.busy_job})"
