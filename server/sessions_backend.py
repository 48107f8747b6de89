"""The session endpoints' backend (`server/cache/http.py` calls it): the conversation cache's session
operations run on the scheduler's worker thread, on a context no request is using, and the slot table
learns what a restore put into the context. A session an older Strata saved is rebuilt there instead: its
tokens read again (session_rebuild.py), then saved again under its name with this engine's KV. Mechanism only;
the cache does the saving and restoring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strata.server import session_rebuild
from strata.server.slots import MAIN

WAIT_S = 600.0


@dataclass(frozen=True)
class RebuiltSession:
    """A restore that read an older Strata's session again from its tokens (the answer's `rebuilt`)."""

    n_tokens: int
    seconds: float
    save_error: str | None    # None: saved again under its name with this engine's KV


class SessionBackend:
    """Mounted before the model loads; refuses with a ValueError (a 400) until the cache exists."""

    def __init__(self, state: Any) -> None:
        self.state = state

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
            raise ValueError(f"context {'main' if ctx == MAIN else ctx} is running a request; retry when it is idle")
        return state

    def save_session(self, name: str, ctx: int) -> dict:
        def run() -> dict:
            self._context(ctx)
            return self.cache.save_session(name, ctx)

        return self.scheduler.call(run).result(WAIT_S)

    def restore_session(self, name: str, ctx: int) -> Any:
        def run() -> Any:
            state = self._context(ctx)
            if not self.cache.has_session(name):
                # answered before the park below: a 404 changes nothing (parked, the history still held
                # there was marked parked, and once its cache entry went, overwriting it parked nothing)
                raise KeyError(f"no session named {name!r}")
            tokens = self.cache.session_to_rebuild(name)
            if tokens is not None:   # refused before the park too: nothing is changed
                session_rebuild.check_fits(name, len(tokens), self.scheduler.engine.context_capacity(ctx),
                                           "main" if ctx == MAIN else str(ctx))
            # the history there goes to the conversation cache first, as a request's displacement does
            self.scheduler.park_to_cache(ctx, "overwritten by a session restore")
            if tokens is not None:
                result = self._rebuild(name, ctx, [int(t) for t in tokens])
            else:
                result = self.cache.restore_session(name, ctx)
                self.scheduler.table.set_tokens(ctx, list(self.scheduler.engine.context_tokens(ctx)))
            state.conversation = f"session:{name}"
            return result

        return self.scheduler.call(run).result(WAIT_S)

    def _rebuild(self, name: str, ctx: int, tokens: list[int]) -> RebuiltSession:
        """Read an older Strata's session again from its tokens, then save it under its name with this engine's KV
        (the next restore is a plain one). A save refused (RAM floor, a full or read-only folder) leaves the
        context rebuilt and the old files as they were; the answer says why."""
        done = session_rebuild.read_again(self.scheduler, ctx, tokens)
        try:
            self.cache.save_session(name, ctx)
            saved_error = None
        except (MemoryError, OSError, ValueError) as exc:
            saved_error = f"{type(exc).__name__}: {exc}"
        return RebuiltSession(done.n_tokens, done.seconds, saved_error)

    def delete_session(self, name: str) -> bool:
        return self.cache.delete_session(name)

    def list_sessions(self) -> list[dict]:
        return self.cache.list_sessions()
