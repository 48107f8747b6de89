"""A --cache-reuse move interrupted by the stop (Engine.interrupt lands inside Engine.splice) is no failure: it is
logged at INFO, not as an ERROR with a traceback (a user's log at every Quit that met an editor's keystroke), and the
context is cut back to what precedes the move, as after any failed move: the request reads its prompt instead and is
answered as without the move. A live server (tiny model with fill-in-the-middle tokens); the engine's splice is the
real one, interrupted by the real flag (set around that one call only, so the server goes on)."""

from __future__ import annotations

import logging
from typing import Any

import requests

from tests.server.live import LiveServer
from tests.server.test_completion_cache_reuse import PREFIX, SUFFIX


class SpliceInterrupted:
    """The real engine; its splices run with the interrupt on, as when the stop lands during one."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.splices = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def splice(self, *a: Any, **kw: Any) -> Any:
        self.splices += 1
        self._engine.interrupt(True)
        try:
            return self._engine.splice(*a, **kw)
        finally:
            self._engine.interrupt(False)


def infill(server: LiveServer, typed: str) -> dict:
    r = requests.post(server.url + "/infill", timeout=120, json={
        "input_prefix": PREFIX, "prompt": typed, "input_suffix": SUFFIX, "n_predict": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()


def test_an_interrupted_move_is_logged_as_the_stop_and_the_prompt_read(fim_coder, caplog):
    with LiveServer(model=str(fim_coder), ctx=4096, batch=0, threads=1) as s:
        first = infill(s, "y = ")
        sched = s.state.scheduler
        real = sched.engine
        sched.engine = wrapped = SpliceInterrupted(real)
        try:
            with caplog.at_level(logging.INFO):
                second = infill(s, "y = f")
        finally:
            sched.engine = real
        assert wrapped.splices == 1
        fresh = infill(s, "y = f")             # the same keystroke again, its history read whole by the second
    moved = [r for r in caplog.records if "cached tokens of context" in r.getMessage()]
    assert moved and all(r.levelno == logging.INFO and r.exc_info is None for r in moved), \
        [(r.levelname, r.getMessage()) for r in moved]
    assert "the stop interrupted moving" in moved[0].getMessage()
    assert second["timings"]["prompt_n"] > 400            # the suffix read again instead of moved (moved: <= 6)
    assert second["content"] == fresh["content"] and first["tokens_evaluated"] > 1000
