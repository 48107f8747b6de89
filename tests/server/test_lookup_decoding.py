"""Lookup decoding on the real default model behind live servers: with drafts (`--lookup-draft 8`) the
output is exactly what plain decoding (`--lookup-draft 0`) gives, greedy and sampled, streamed or not,
when a stop sequence or the token limit falls inside a draft, on a second turn that reuses the first
(the rejected draft tokens were truncated from the context), and batched; and the drafts are really
taken on a prompt that asks for code to be repeated (else these checks would prove nothing).

Not here: the pure rules (test_lookup.py), Engine.extend's bits (tests/engine/test_extend.py).
"""

from __future__ import annotations

import random

import openai
import pytest

from tests.fixtures.agent_prompts import CODE
from tests.server.live import LiveServer, run_together

COPY = [{"role": "user", "content": "Copy this code exactly, without any change:\n```python\n" + CODE + "```"}]
TYPES = [{"role": "user", "content": "Add type hints to this code. Reply with the complete code only.\n```python\n"
          + CODE + "```"}]


def serve(model, draft: int):
    return LiveServer(model=str(model), ctx=2048, batch=2, slot_ctx=1024, threads=2, conversation_cache_mib=0,
                      lookup_draft=draft, lookup_rows=2)


@pytest.fixture(scope="module")
def servers(default_model_path):
    with serve(default_model_path, 8) as on, serve(default_model_path, 0) as off:
        yield on, off


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)


def both(servers, **request):
    """The same request through the server with drafts and the one without; (on, off) responses and the
    draft tokens the first took for it."""
    on, off = servers
    before = on.state.metrics.snapshot()["lookup_taken_total"]
    r_on = client(on).chat.completions.create(model="m", **request)
    taken = on.state.metrics.snapshot()["lookup_taken_total"] - before
    return r_on, client(off).chat.completions.create(model="m", **request), taken


def same(a, b) -> None:
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.choices[0].finish_reason == b.choices[0].finish_reason
    assert a.usage.completion_tokens == b.usage.completion_tokens


def test_greedy_output_is_plain_decodings_and_drafts_are_taken(servers):
    on, off, taken = both(servers, messages=COPY, max_tokens=120, temperature=0)
    same(on, off)
    assert taken >= 20, "the code was repeated: lookup should have saved steps"
    assert servers[1].state.metrics.snapshot()["lookup_drafted_total"] == 0


def test_sampled_output_is_plain_decodings(servers):
    on, off, taken = both(servers, messages=TYPES, max_tokens=100, temperature=0.8, top_p=0.95, seed=11)
    same(on, off)
    assert taken > 0


def test_stream_equals_the_whole_answer(servers):
    on = client(servers[0])
    whole = on.chat.completions.create(model="m", messages=COPY, max_tokens=80, temperature=0)
    chunks = list(on.chat.completions.create(model="m", messages=COPY, max_tokens=80, temperature=0, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content


@pytest.mark.parametrize("max_tokens", [13, 37])
def test_the_token_limit_inside_a_draft(servers, max_tokens):
    on, off, _ = both(servers, messages=COPY, max_tokens=max_tokens, temperature=0)
    same(on, off)
    assert on.usage.completion_tokens == max_tokens and on.choices[0].finish_reason == "length"


def test_a_stop_sequence_inside_a_draft(servers):
    on, off, _ = both(servers, messages=COPY, max_tokens=120, temperature=0, stop=["max("])
    same(on, off)
    assert on.choices[0].finish_reason == "stop" and "max(" not in on.choices[0].message.content


def test_a_second_turn_reuses_the_first_exactly_as_without_drafts(servers):
    first, _, _ = both(servers, messages=TYPES, max_tokens=60, temperature=0)
    turn2 = TYPES + [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "Now rename the function to merge_ranges."}]
    on, off, _ = both(servers, messages=turn2, max_tokens=60, temperature=0)
    same(on, off)
    assert on.usage.prompt_tokens_details.cached_tokens == off.usage.prompt_tokens_details.cached_tokens
    assert on.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens


def test_two_requests_batched_with_drafts_equal_plain_solo_answers(servers):
    on, off = servers
    alone = [client(off).chat.completions.create(model="m", messages=m, max_tokens=60, temperature=0)
             for m in (COPY, TYPES)]
    before = on.state.metrics.snapshot()["lookup_taken_total"]
    together = run_together(on, [
        lambda m=m: client(on).chat.completions.create(model="m", messages=m, max_tokens=60, temperature=0)
        for m in (COPY, TYPES)])
    for a, b in zip(together, alone, strict=True):
        same(a, b)
    assert on.state.metrics.snapshot()["lookup_taken_total"] > before


@pytest.fixture(scope="module")
def tiny_pair(tiny_model):
    """The tiny random model (its answers loop, so guesses are taken, and it ends them at random) with
    and without lookup decoding, two slots each."""
    flags = dict(model=str(tiny_model), ctx=2048, batch=2, slot_ctx=1024, threads=1, conversation_cache_mib=0)
    with LiveServer(lookup_draft=8, **flags) as on, LiveServer(lookup_draft=0, **flags) as off:
        yield on, off


@pytest.mark.parametrize("seed", range(12))
def test_random_requests_on_a_looping_model_give_plain_decodings_answers(tiny_pair, seed):
    rng = random.Random(seed)
    words = [rng.choice(["alpha", "beta", "gamma", "delta", "x = 1", "\n", "return", "(", ")"]) for _ in range(40)]
    request = {"messages": [{"role": "user", "content": " ".join(words)}], "max_tokens": rng.randint(1, 90),
               "temperature": rng.choice([0, 0.7, 1.3]), "seed": seed, "top_p": rng.choice([1.0, 0.9])}
    if rng.random() < 0.4:
        request["stop"] = [rng.choice(words)]
    on, off, _ = both(tiny_pair, **request)
    same(on, off)


def test_the_looping_model_takes_guesses(tiny_pair):
    on, off, taken = both(tiny_pair, messages=[{"role": "user", "content": "alpha beta gamma"}], max_tokens=90,
                          temperature=0)
    same(on, off)
    assert taken > 0


def test_no_guess_is_checked_past_the_token_limit(servers):
    """A guess can be taken only up to max_tokens, so none is checked beyond it. Copying code, the first
    step after "```python" already guesses; with max_tokens 3 (one token from the prompt's logits, so at
    most 2 more) a step may guess 1 token at most, where it used to check 4."""
    on, _ = servers
    before = on.state.metrics.snapshot()["lookup_drafted_total"]
    r_on, r_off, _ = both(servers, messages=COPY, max_tokens=3, temperature=0)
    same(r_on, r_off)
    assert on.state.metrics.snapshot()["lookup_drafted_total"] - before <= 1
    r_on, r_off, taken = both(servers, messages=COPY, max_tokens=20, temperature=0)
    same(r_on, r_off)
    assert taken > 0      # and guesses are still taken where the limit leaves room
