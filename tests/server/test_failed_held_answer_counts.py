"""A held answer failed alone among its forced tokens (its sampler raising in lookup_step.take_draft, after some of
them were taken: row_failure.py) counts the ones it took in strata_held_forced_tokens_total, as one that ends does.
They were read in the step's forward and kept (the context is cut back to the tokens the table took, those among
them), while /metrics skipped them: take_draft's count of forced tokens was only its return value, which a failure
never gives. The live tiny server with a real JSON-schema held answer beside two plain completions (lookup
guesses off: the held answer is the only row with a draft); the fault is in the victim's own sampler, as in
test_one_row_fails_alone.py."""

from __future__ import annotations

from typing import Any

import httpx2 as httpx

from .live import run_together
from .test_metrics import scrape
from .test_one_row_fails_alone import FAULT, PROMPTS, FaultOnOneRow, Replaced, serve

FLAGS = dict(mixed_piece=0, lookup_draft=0)
# keys long enough that the answer's forced text (a key, its quotes) is several tokens of the tiny vocabulary
SCHEMA = {"type": "json_schema", "json_schema": {"name": "weather", "schema": {
    "type": "object", "properties": {"temperature_in_celsius": {"type": "integer"},
                                     "description_of_weather": {"type": "string"}},
    "required": ["temperature_in_celsius", "description_of_weather"]}}}


class Extends:
    """The real engine, each `extend` call's (context, tokens fed) recorded."""

    def __init__(self, engine: Any) -> None:
        self._engine, self.calls = engine, []

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._engine, name)
        if name != "extend":
            return real

        def extend(pieces: Any, *args: Any, **kw: Any) -> Any:
            self.calls.append([(ctx, len(tokens)) for ctx, tokens in pieces])
            return real(pieces, *args, **kw)
        return extend


def complete(url: str, prompt: list[int], held: bool) -> httpx.Response:
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": 60, "temperature": 0}
    if held:
        body["response_format"] = SCHEMA
    return httpx.post(url + "/v1/completions", json=body, timeout=120)


def test_a_held_answer_failed_among_its_forced_tokens_counts_those_it_took(tiny_model):
    armed_at: list[tuple[int, int]] = []      # (the victim's context, extend calls made when its sampler broke)

    def samples_once_more(row: Any) -> None:
        """The victim's sampler takes the token after its pending one (the forced text's first), then raises."""
        real, used = row.sampler, []

        def sample(*args: Any, **kw: Any) -> Any:
            if used:
                raise RuntimeError(FAULT)
            used.append(1)
            return real.sample(*args, **kw)
        row.sampler = Replaced(real, sample=sample)
        armed_at.append((row.ctx, len(recorder.calls)))

    with serve(tiny_model, FLAGS) as server:
        sched = server.state.scheduler
        recorder = Extends(sched.engine)
        # armed after the first extend that feeds the victim two forced tokens or more (it checks them after it)
        spy = FaultOnOneRow(recorder, sched, PROMPTS[1], "extend",
                            lambda row, pieces, *_: any(c == row.ctx and len(t) > 2 for c, t in pieces),
                            samples_once_more)
        sched.engine = spy
        try:
            got = run_together(server, [lambda i=i, p=p: complete(server.url, p, held=i == 1)
                                        for i, p in enumerate(PROMPTS)])
        finally:
            sched.engine = recorder._engine
        counted = scrape(server.url)
    assert spy.armed and len(armed_at) == 1
    assert got[1].status_code == 500 and FAULT in got[1].text, got[1].text
    assert got[0].status_code == 200 and got[2].status_code == 200
    victim, calls = armed_at[0]
    # the engine read the victim's forced text whole in the extends before (a held answer takes all of it), and its
    # first token in the one it failed after; no other row had a draft
    before = sum(n - 1 for call in recorder.calls[:calls - 1] for c, n in call if c == victim)
    assert counted["strata_held_forced_tokens_total"] == before + 1      # before the fix: `before` (the 1 skipped)
    assert counted['strata_held_answers_total{rule="json"}'] == 1
