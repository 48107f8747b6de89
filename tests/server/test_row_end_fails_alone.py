"""A request's own end failing (its bookkeeping after it left the running rows: here its held answer's count of
refused choices, read for /metrics) still answers that request, and fails none beside it. row_failure.guarded
took such a failure as "nothing left to end" (the row no longer running): its answer was never posted, and its
client waited for ever. And where the request's error end after a failure in its sampling failed the same way,
that second failure escaped to the step's catch-all, which failed every request beside it and blanked their
contexts, the very thing row_failure.py is there to prevent.

The fault is in the victim's own state (its sampler), swapped on the worker thread after its first decode step,
as in test_one_row_fails_alone.py; everything else is the live tiny server with a real JSON-held answer."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx
import pytest

from .live import run_together
from .test_one_row_fails_alone import FAULT, PROMPTS, FaultOnOneRow, Replaced, raising, serve

FLAGS = dict(mixed_piece=0, lookup_draft=0)
TIMEOUT_S = 60      # the victim's answer before the fix: never (a client waiting for ever)


class RefusalsFail(Replaced):
    """The victim's sampler, whose count of refused choices (read at its end, after it left the running rows)
    cannot be read."""

    @property
    def refusals(self) -> int:
        raise RuntimeError(FAULT)


def end_fails(row: Any) -> None:
    row.sampler = RefusalsFail(row.sampler)


def sampling_and_end_fail(row: Any) -> None:
    row.sampler = RefusalsFail(row.sampler, sample=raising)


def complete(url: str, prompt: list[int], held: bool) -> httpx.Response:
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    if held:
        body["response_format"] = {"type": "json_object"}
    return httpx.post(url + "/v1/completions", json=body, timeout=TIMEOUT_S)


def together(server: Any) -> list[httpx.Response]:
    return run_together(server, [lambda i=i, p=p: complete(server.url, p, held=i == 1) for i, p in enumerate(PROMPTS)])


@pytest.mark.parametrize("fault", [end_fails, sampling_and_end_fail], ids=["end", "sampling and end"])
def test_a_rows_failing_end_answers_it_and_fails_no_other(tiny_model, fault):
    with serve(tiny_model, FLAGS) as clean:
        expected = [r.json()["choices"][0]["text"] for r in together(clean)]
    with serve(tiny_model, FLAGS) as server:
        sched = server.state.scheduler
        spy = FaultOnOneRow(sched.engine, sched, PROMPTS[1], "decode",
                            lambda row, ctxs, *_: row.ctx in ctxs and len(row.generated) >= 3, fault)
        sched.engine = spy
        try:
            got = together(server)       # before: the victim's read timed out (end), or all three 500 (both)
        finally:
            sched.engine = spy._engine
        assert spy.armed
        victim = got.pop(1)
        if fault is end_fails:           # its answer was whole: it is sent as it is
            assert victim.status_code == 200, victim.text
            assert victim.json()["choices"][0]["text"] == expected[1]
        else:
            assert victim.status_code == 500 and FAULT in victim.text, victim.text
        for i, r in zip((0, 2), got, strict=True):
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["text"] == expected[i]
            nxt = complete(server.url, PROMPTS[i] + [5, 6, 7], held=False)
            assert nxt.status_code == 200, nxt.text
            assert nxt.json()["timings"]["cache_n"] >= len(PROMPTS[i]), nxt.json()["timings"]
        assert sched.last_error is not None and FAULT in sched.last_error
        for c in range(len(sched.table.contexts)):
            if sched.table.contexts[c].valid:
                assert sched.engine.context_tokens(c) == sched.table.contexts[c].tokens, c
        assert httpx.get(server.url + "/health", timeout=30).status_code == 200
