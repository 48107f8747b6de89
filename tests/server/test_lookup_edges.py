"""Lookup decoding at the edges of the engine's limits, on the tiny random model (its answers loop, so
guesses are taken) behind live servers: a forward's row limit smaller than the drafts would need
(`--prefill-chunk` small); a context filling up inside a draft; penalties, which read what was
generated so far, and `ignore_eos`; engine and slot table holding the same tokens after drafts were
cut by stops, limits and end-of-turn tokens; the counters and request records adding up; and a
context whose engine call failed then serving the next request.

Not here: the ordinary equality checks (test_lookup_decoding.py), the pure rules (test_lookup.py).
"""

from __future__ import annotations

import httpx2 as httpx
import openai
import pytest

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


@pytest.fixture(scope="module")
def small_pair(tiny_model):
    """Small contexts (main 160, two slots of 96 tokens), with and without lookup decoding."""
    flags = dict(model=str(tiny_model), ctx=160, batch=2, slot_ctx=96, threads=1, conversation_cache_mib=0)
    with LiveServer(lookup_draft=8, **flags) as on, LiveServer(lookup_draft=0, **flags) as off:
        yield on, off


def taken(server) -> int:
    return server.state.metrics.snapshot()["lookup_taken_total"]


def test_a_context_filling_up_inside_a_draft(small_pair):
    on, off = small_pair
    before = taken(on)
    r_on, r_off = (ask(s, messages=LOOP, max_tokens=1000, temperature=0, extra_body={"ignore_eos": True})
                   for s in small_pair)
    same(r_on, r_off)
    assert r_on.choices[0].finish_reason == "length"
    assert r_on.usage.prompt_tokens + r_on.usage.completion_tokens >= 159   # up to main's capacity
    assert taken(on) > before


@pytest.mark.parametrize("penalties", [
    {"frequency_penalty": -1.0}, {"presence_penalty": -2.0}, {"repeat_penalty": 0.8},
    {"frequency_penalty": -0.6, "repeat_penalty": 0.9, "temperature": 0.7, "seed": 4}])
def test_penalties_read_the_same_generated_tokens(small_pair, penalties):
    """Penalties weigh what was generated so far; each guess is sampled after the ones before it were
    appended, as plain decoding would. Penalties below zero (and a repeat penalty below one) make the
    tiny model repeat itself, so that guesses are taken under them."""
    on, off = small_pair
    extra = {k: v for k, v in penalties.items() if k == "repeat_penalty"}
    request = {"messages": LOOP, "max_tokens": 60, "temperature": 0,
               **{k: v for k, v in penalties.items() if k != "repeat_penalty"}, "extra_body": extra}
    before = taken(on)
    same(ask(on, **request), ask(off, **request))
    assert taken(on) - before >= 5


def test_engine_and_slot_table_agree_after_drafts_cut_short(small_pair):
    """Requests whose stop word, token limit or end-of-turn falls inside drafts, two at a time in the
    slots and alone in main: the tokens the engine's contexts hold are the slot table's (the rejected
    draft tokens were truncated away), so reuse and parking see what was really computed."""
    on, off = small_pair
    before = taken(on)
    requests = [{"messages": LOOP, "max_tokens": n, "temperature": t, "seed": n}
                for n, t in ((7, 0), (23, 0), (40, 0.8), (60, 1.3))]
    requests.append({"messages": LOOP, "max_tokens": 50, "temperature": 0, "stop": ["gamma", "beta"]})
    for a, b in zip(requests[::2], requests[1::2], strict=False):
        together = run_together(on, [lambda r=r: ask(on, **r) for r in (a, b)])
        for r, got in zip((a, b), together, strict=True):
            same(got, ask(off, **r))
        for engine_tokens, table_tokens in engine_and_table_tokens(on.state.scheduler):
            assert engine_tokens == table_tokens
    same(ask(on, **requests[-1]), ask(off, **requests[-1]))
    for engine_tokens, table_tokens in engine_and_table_tokens(on.state.scheduler):
        assert engine_tokens == table_tokens
    assert taken(on) > before


def test_counters_and_the_request_record_add_up(small_pair):
    """Alone in main with a length finish: one token from the prompt's logits, then each step gives its
    row one token plus the guesses taken, so completion = 1 + rows + taken, and /metrics, the request's
    record in /v1/monitor and the metrics snapshot say the same counts."""
    on, _ = small_pair
    before = scrape(on.url)
    r = ask(on, messages=LOOP, max_tokens=50, temperature=0, extra_body={"ignore_eos": True})
    after = scrape(on.url)
    delta = {k: after[k] - before.get(k, 0) for k in after if k.startswith("strata_")}
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 50
    taken_n, drafted = delta["strata_lookup_taken_tokens_total"], delta["strata_lookup_drafted_tokens_total"]
    assert 0 < taken_n <= drafted
    assert r.usage.completion_tokens == 1 + delta["strata_decode_rows_total"] + taken_n
    assert delta["strata_generated_tokens_total"] == 50
    rec = httpx.get(on.url + "/v1/monitor", timeout=30).json()["requests"][-1]
    assert (rec["output_tokens"], rec["lookup_taken"], rec["lookup_drafted"]) == (50, taken_n, drafted)


def scrape(url: str) -> dict[str, float]:
    values = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("strata_"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values
