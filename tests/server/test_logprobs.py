"""`logprobs` on chat completions (`logprobs` + `top_logprobs`) and completions (`logprobs: N`) through the
real `openai` SDK on the tiny model: each generated token's log-probability under the model's own
distribution (checked against the engine's logits for the same prompt), its alternatives, streamed and
not; a `top_logprobs` without `logprobs` is a 400."""

from __future__ import annotations

import math

import numpy as np
import openai
import pytest

ASK = [{"role": "user", "content": "Count to five."}]


def is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_chat_logprobs_are_the_models_own(oai, tiny_model, tiny_server):
    from strata.engine import Engine
    from strata.server.prompting import render_chat

    r = oai.chat.completions.create(model="m", messages=ASK, max_tokens=8, temperature=0, logprobs=True,
                                    top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 8
    assert bytes(b for c in content for b in c.bytes).decode("utf-8", "replace") == r.choices[0].message.content
    for c in content:
        assert len(c.top_logprobs) == 3 and c.logprob <= 0
        assert [t.logprob for t in c.top_logprobs] == sorted((t.logprob for t in c.top_logprobs), reverse=True)
        assert c.token == c.top_logprobs[0].token and c.logprob == c.top_logprobs[0].logprob   # greedy: the best
        # a token that is part of a character is written "bytes:\xNN..." (its bytes are exact)
        raw = bytes(c.bytes)
        assert c.token == (raw.decode() if is_utf8(raw) else "bytes:" + "".join(f"\\x{b:02x}" for b in raw))
    # the first token's log-probability is the log-softmax of the engine's logits after the prompt
    e = Engine(str(tiny_model), n_ctx=256, n_threads=1)
    prompt = render_chat(e, ASK, None)
    e.prefill(0, prompt)
    x = e.logits(0).astype(np.float64)
    want = x - (x.max() + math.log(np.exp(x - x.max()).sum()))
    assert content[0].logprob == pytest.approx(float(want.max()), abs=1e-4)
    assert sum(math.exp(t.logprob) for t in content[0].top_logprobs) <= 1.0 + 1e-9


def test_streamed_chat_logprobs_cover_every_token(oai):
    chunks = list(oai.chat.completions.create(model="m", messages=ASK, max_tokens=6, temperature=0, logprobs=True,
                                              stream=True, stream_options={"include_usage": True}))
    entries = [c for ch in chunks if ch.choices and ch.choices[0].logprobs for c in ch.choices[0].logprobs.content]
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert len(entries) == chunks[-1].usage.completion_tokens
    assert bytes(b for c in entries for b in c.bytes).decode("utf-8", "replace") == text
    assert all(c.top_logprobs == [] for c in entries)      # logprobs alone: no alternatives


def test_without_logprobs_there_are_none(oai):
    r = oai.chat.completions.create(model="m", messages=ASK, max_tokens=4)
    assert r.choices[0].logprobs is None


def test_top_logprobs_needs_logprobs(oai):
    with pytest.raises(openai.BadRequestError, match="'top_logprobs' needs 'logprobs': true"):
        oai.chat.completions.create(model="m", messages=ASK, max_tokens=4, top_logprobs=2)
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        oai.chat.completions.create(model="m", messages=ASK, max_tokens=4, logprobs=True, top_logprobs=21)


@pytest.mark.parametrize("stream", [False, True])
def test_completions_logprobs_in_the_legacy_shape(oai, stream):
    kw = dict(model="m", prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=2)
    if stream:
        chunks = list(oai.completions.create(stream=True, **kw))
        lps = [ch.choices[0].logprobs for ch in chunks if ch.choices and ch.choices[0].logprobs]
        tokens = [t for lp in lps for t in lp.tokens]
        offsets = [o for lp in lps for o in lp.text_offset]
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        assert len(tokens) == 6
    else:
        r = oai.completions.create(**kw)
        lp = r.choices[0].logprobs
        tokens, offsets, text = lp.tokens, lp.text_offset, r.choices[0].text
        assert len(lp.token_logprobs) == len(lp.top_logprobs) == len(tokens) == r.usage.completion_tokens
        assert all(len(alt) == 2 and max(alt.values()) == p for alt, p in zip(lp.top_logprobs, lp.token_logprobs,
                                                                              strict=True))
    # each whole token stands in the text at its offset; offsets never go back
    for t, o in zip(tokens, offsets, strict=True):
        assert t.startswith("bytes:") or text[o:o + len(t)] == t
    assert offsets == sorted(offsets) and offsets[0] == 0
