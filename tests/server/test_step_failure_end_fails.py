"""A forward that fails (the engine's own failure: the step's catch-all ends every running request) while one of
those requests' own end cannot be made (here its stop-string state unreadable as its completion is built):
every request in flight is answered with an internal error, and the server serves the next request. Before,
that second failure escaped the catch-all and ended the scheduler's worker thread: no answer came to anyone,
then or after (every client waited for ever).

The faults are injected in the live tiny server as in test_one_row_fails_alone.py: the victim's own stopper is
swapped, and the same decode call then raises, as an engine failure would."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx

from .live import run_together
from .test_one_row_fails_alone import PROMPTS, Replaced, serve

ENGINE_FAULT = "the forward failed (injected)"
TIMEOUT_S = 60      # before the fix: never answered


class StopperFails(Replaced):
    """The victim's stop-string state, whose text (read as its completion is built) cannot be read."""

    @property
    def text(self) -> str:
        raise RuntimeError("stop strings failed (injected)")


class DecodeFailsOnce:
    """The real engine, except that the first decode holding the victim's row (its prompt `victim`, a few tokens
    made) breaks that row's stopper and then fails as a whole."""

    def __init__(self, engine: Any, sched: Any, victim: list[int]) -> None:
        self._engine, self._sched, self._victim = engine, sched, victim
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._engine, name)
        if name != "decode":
            return real

        def decode(ctxs: Any, *args: Any, **kw: Any) -> Any:
            row = next((r for r in self._sched._rows.values() if r.job.prompt[-len(self._victim):] == self._victim),
                       None)
            if not self.fired and row is not None and row.ctx in ctxs and len(row.generated) >= 3:
                self.fired = True
                row.stopper = StopperFails(row.stopper)
                raise RuntimeError(ENGINE_FAULT)
            return real(ctxs, *args, **kw)
        return decode


def complete(url: str, prompt: list[int]) -> httpx.Response:
    return httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 24, "temperature": 0,
                                                     "ignore_eos": True}, timeout=TIMEOUT_S)


def test_an_end_failing_in_the_catch_all_answers_everyone_and_the_server_goes_on(tiny_model):
    with serve(tiny_model, dict(mixed_piece=0, lookup_draft=0)) as server:
        sched = server.state.scheduler
        spy = DecodeFailsOnce(sched.engine, sched, PROMPTS[1])
        sched.engine = spy
        try:
            got = run_together(server, [lambda p=p: complete(server.url, p) for p in PROMPTS])
        finally:
            sched.engine = spy._engine
        assert spy.fired
        for r in got:       # every request of the failed step: an error naming the engine's failure
            assert r.status_code == 500 and ENGINE_FAULT in r.text, r.text
        assert sched._thread.is_alive()
        after = complete(server.url, PROMPTS[1])
        assert after.status_code == 200, after.text
        assert httpx.get(server.url + "/health", timeout=10).status_code == 200
        metrics = httpx.get(server.url + "/metrics", timeout=10).text
        assert 'status="error"} 3' in metrics, [ln for ln in metrics.splitlines() if "requests_total" in ln]
