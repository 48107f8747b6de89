"""Lookup decoding at the edges of the engine's limits, on the tiny random model (its answers loop, so
guesses are taken) behind live servers: a forward's row limit smaller than the drafts would need
(`--prefill-chunk` small), and a context whose engine call failed then serving the next request.

Not here: the ordinary equality checks (test_lookup_decoding.py), the pure rules (test_lookup.py).
"""

from __future__ import annotations

import openai

from tests.server.live import LiveServer, run_together

LOOP = [{"role": "user", "content": "alpha beta gamma"}]


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)


def ask(server, **request):
    return client(server).chat.completions.create(model="m", **request)


def same(a, b) -> None:
    assert a.choices[0].finish_reason == b.choices[0].finish_reason
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.completion_tokens == b.usage.completion_tokens


def test_drafts_fit_a_forward_row_limit_below_their_size(tiny_model):
    """--prefill-chunk 4 sizes the engine's forward at max(4, contexts) = 4 rows: a draft of 8 (9 rows
    with the next token) must shrink to fit, never fail the request."""
    flags = dict(model=str(tiny_model), ctx=2048, batch=2, slot_ctx=1024, threads=1, conversation_cache_mib=0,
                 prefill_chunk=4)
    with LiveServer(lookup_draft=8, **flags) as on, LiveServer(lookup_draft=0, **flags) as off:
        assert on.state.engine.max_rows == 4
        r_on = ask(on, messages=LOOP, max_tokens=60, temperature=0)
        r_off = ask(off, messages=LOOP, max_tokens=60, temperature=0)
        same(r_on, r_off)
        assert on.state.metrics.snapshot()["lookup_taken_total"] > 0
        # two rows at once: each draft shares the 4 rows (1 + 1 guess each)
        sends = [lambda m=m: ask(on, messages=m, max_tokens=40, temperature=0)
                 for m in (LOOP, [{"role": "user", "content": "beta gamma delta"}])]
        together = run_together(on, sends)
        alone = [ask(off, messages=m, max_tokens=40, temperature=0)
                 for m in (LOOP, [{"role": "user", "content": "beta gamma delta"}])]
        for a, b in zip(together, alone, strict=True):
            same(a, b)
        assert on.state.scheduler.last_error is None


class ExtendFailsOnce:
    """The real engine, whose next `extend` fails the way a device error would (before anything is
    applied): a failure the scheduler cannot cause on purpose on a CPU, injected around the real thing."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.failed = False

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def extend(self, pieces):
        if not self.failed:
            self.failed = True
            raise RuntimeError("injected engine failure")
        return self._engine.extend(pieces)


def engine_and_table_tokens(sched) -> list[tuple[list[int], list[int]]]:
    return sched.call(lambda: [(list(sched.engine.context_tokens(c.id)), list(c.tokens))
                               for c in sched.table.contexts]).result(30)


def test_after_a_failed_step_the_context_serves_the_next_request_from_scratch(tiny_model):
    """A failed engine call fails its requests and marks their contexts invalid; the next request in
    such a context must not read its prompt after the engine's stale tokens (positions shifted, the
    old tokens attended to): its answer is a fresh server's, and engine and slot table agree."""
    flags = dict(model=str(tiny_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0)
    with LiveServer(lookup_draft=8, **flags) as on, LiveServer(lookup_draft=0, **flags) as fresh:
        sched = on.state.scheduler
        sched.call(lambda: setattr(sched, "engine", ExtendFailsOnce(sched.engine))).result(30)
        try:
            ask(on, messages=LOOP, max_tokens=60, temperature=0)
            raise AssertionError("the injected failure did not fail the request")
        except openai.InternalServerError as e:
            assert "injected engine failure" in str(e)
        other = [{"role": "user", "content": "one two three"}]
        same(ask(on, messages=other, max_tokens=30, temperature=0),
             ask(fresh, messages=other, max_tokens=30, temperature=0))
        for engine_tokens, table_tokens in engine_and_table_tokens(sched):
            assert engine_tokens == table_tokens
        assert sched.table.main.valid
