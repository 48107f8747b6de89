"""Scoring a prompt on `/v1/completions` (`echo` + `logprobs`, `max_tokens: 0`: lm-eval-harness's loglikelihood)
through the real `openai` SDK on a real `strata serve` in a subprocess: every prompt token's log-probability (the
first's null) and its alternatives, against the NumPy reference forward on the tiny model and against the engine's
own decode steps (teacher-forced) on the default model; a prompt the contexts or the cache already hold is scored
whole all the same; the generated tokens follow the prompt's in one list; streamed as one chunk; bad pairs a 400."""

from __future__ import annotations

import json
import math

import httpx2 as httpx
import numpy as np
import openai
import pytest

from tests.fixtures.reference import reference_logits
from tests.server.test_auth_and_lifecycle import serving

TEXT = ("The quick brown fox jumps over the lazy dog. " * 12).strip()   # > 128 tokens: several scored pieces


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


@pytest.fixture(scope="module")
def tiny_scoring(tiny_model, tmp_path_factory):
    """strata serve on the tiny model, two slots, a conversation cache."""
    tmp = tmp_path_factory.mktemp("scoring")
    with serving(["--model", str(tiny_model), "--ctx", "2048", "--batch", "2", "--slot-ctx", "1024",
                  "--conversation-cache-cold-dir", str(tmp / "cold")], tmp) as (port, _):
        yield (openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120),
               port, tiny_model)


def prompt_ids(model, text: str) -> list[int]:
    """`text`'s tokens as the server reads a text prompt (prompting.tokenized: special tokens parsed)."""
    from strata.engine import Engine

    return list(Engine(str(model), n_ctx=64, n_threads=1).tokenize(text, special=True))


def check_scored(lp, tokens: list[int], text: str) -> None:
    """The shape OpenAI gives a scored echo: a token each, the first's logprob and alternatives null."""
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == len(tokens)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert "".join(lp.tokens) == text
    assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(len(tokens))]


def test_scores_are_the_reference_models(tiny_scoring):
    client, port, model = tiny_scoring
    tokens = prompt_ids(model, TEXT)
    assert len(tokens) > 128
    r = client.completions.create(model="m", prompt=TEXT, echo=True, max_tokens=0, logprobs=2)
    c = r.choices[0]
    assert c.text == TEXT and c.finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(tokens), 0)
    check_scored(c.logprobs, tokens, TEXT)
    ref = reference_logits(model, tokens)[:-1]               # row i: the logits after tokens[i]
    want = log_softmax(ref)
    # f16 KV: the engine's logits within 3e-3 of each row's scale (test_logits_reference), a log-softmax twice that
    tol = 2 * 3e-3 * np.abs(ref).max(axis=1)
    got = np.array(c.logprobs.token_logprobs[1:])
    assert np.all(np.abs(got - want[np.arange(len(tokens) - 1), tokens[1:]]) <= tol)
    for i, alts in enumerate(c.logprobs.top_logprobs[1:]):
        assert len(alts) == 2
        best = np.sort(want[i])[::-1][:2]
        assert np.abs(np.array(sorted(alts.values(), reverse=True)) - best).max() <= tol[i]


def test_a_prompt_already_held_is_scored_whole(tiny_scoring):
    """A history in a context (an ordinary request read it) or restored from the cache has its last position's
    logits only: a scored prompt is read again, every time, and scores the same."""
    client, _, _ = tiny_scoring
    prompt = TEXT[:200]
    client.completions.create(model="m", prompt=prompt, max_tokens=2, temperature=0)   # the contexts hold it
    first = client.completions.create(model="m", prompt=prompt, echo=True, max_tokens=0, logprobs=0)
    again = client.completions.create(model="m", prompt=prompt, echo=True, max_tokens=0, logprobs=0)
    for r in (first, again):
        assert r.usage.prompt_tokens_details.cached_tokens == 0
        assert r.choices[0].logprobs.top_logprobs[1:] == [{}] * (r.usage.prompt_tokens - 1)   # logprobs 0: none
    assert first.choices[0].logprobs.token_logprobs == again.choices[0].logprobs.token_logprobs


def test_the_prompts_own_tokens_are_scored(tiny_scoring):
    """A text prompt that a context holds in other tokens (sent before as ids, one a character) is scored in its
    own tokens, not taken for the history's split (context_choice.align_arrival)."""
    client, _, model = tiny_scoring
    text = "the quick brown fox jumps over the lazy dog and then the quick brown fox sleeps"
    own = prompt_ids(model, text)
    split = [t for ch in text for t in prompt_ids(model, ch)]
    assert len(split) > len(own)
    client.completions.create(model="m", prompt=split, max_tokens=1, temperature=0)   # a context holds the split
    r = client.completions.create(model="m", prompt=text + " again", echo=True, max_tokens=0, logprobs=0)
    check_scored(r.choices[0].logprobs, prompt_ids(model, text + " again"), text + " again")


def test_generated_tokens_follow_the_prompts(tiny_scoring):
    client, port, model = tiny_scoring
    prompt = "Once upon a time"
    n = len(prompt_ids(model, prompt))
    plain = client.completions.create(model="m", prompt=prompt, max_tokens=5, temperature=0, logprobs=1)
    r = client.completions.create(model="m", prompt=prompt, max_tokens=5, temperature=0, logprobs=1, echo=True)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == prompt + plain.choices[0].text
    assert len(lp.tokens) == n + r.usage.completion_tokens and r.usage.completion_tokens == 5
    assert lp.tokens[n:] == plain.choices[0].logprobs.tokens
    assert lp.token_logprobs[n:] == pytest.approx(plain.choices[0].logprobs.token_logprobs, abs=1e-5)
    assert lp.text_offset[n] == len(prompt)      # the answer's offsets run on from the prompt's


def test_streamed_scoring_is_one_chunk(tiny_scoring):
    client, port, model = tiny_scoring
    prompt = "Once upon a time"
    chunks = list(client.completions.create(model="m", prompt=prompt, echo=True, max_tokens=0, logprobs=1,
                                            stream=True))
    assert len(chunks) == 1
    c = chunks[0].choices[0]
    assert c.text == prompt and c.finish_reason == "length"
    whole = client.completions.create(model="m", prompt=prompt, echo=True, max_tokens=0, logprobs=1)
    assert c.logprobs.token_logprobs == whole.choices[0].logprobs.token_logprobs
    assert c.logprobs.tokens == whole.choices[0].logprobs.tokens
    # on the wire: that chunk, then [DONE]
    with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", timeout=60,
                      json={"prompt": prompt, "echo": True, "max_tokens": 0, "logprobs": 1, "stream": True}) as s:
        events = [line[len("data: "):] for line in s.iter_lines() if line.startswith("data: ")]
    assert len(events) == 2 and events[1] == "[DONE]"
    assert json.loads(events[0])["choices"][0]["text"] == prompt
    # echo alone: the prompt, no scores, one chunk all the same
    plain = list(client.completions.create(model="m", prompt=prompt, echo=True, max_tokens=0, stream=True))
    assert [(ch.choices[0].text, ch.choices[0].finish_reason, ch.choices[0].logprobs) for ch in plain] == [
        (prompt, "length", None)]
    r = client.completions.create(model="m", prompt=prompt, echo=True, max_tokens=0)
    assert (r.choices[0].text, r.choices[0].logprobs, r.usage.completion_tokens) == (prompt, None, 0)
    # generating too: the prompt and its scores first, then the answer's tokens
    chunks = list(client.completions.create(model="m", prompt=prompt, echo=True, max_tokens=3, logprobs=1,
                                            temperature=0, stream=True))
    assert chunks[0].choices[0].text == prompt
    assert chunks[0].choices[0].logprobs.token_logprobs == whole.choices[0].logprobs.token_logprobs
    scored = [t for ch in chunks if ch.choices[0].logprobs for t in ch.choices[0].logprobs.tokens]
    assert len(scored) == len(prompt_ids(model, prompt)) + 3


def test_token_ids_and_a_one_token_prompt(tiny_scoring):
    """lm-eval-harness sends token ids; a prompt of one token has nothing to score: its one entry is null."""
    client, _, model = tiny_scoring
    ids = prompt_ids(model, "Once upon a time")
    by_text = client.completions.create(model="m", prompt="Once upon a time", echo=True, max_tokens=0, logprobs=1)
    by_ids = client.completions.create(model="m", prompt=[ids], echo=True, max_tokens=0, logprobs=1)
    assert by_ids.choices[0].logprobs.token_logprobs == by_text.choices[0].logprobs.token_logprobs
    one = client.completions.create(model="m", prompt=ids[:1], echo=True, max_tokens=0, logprobs=1)
    lp = one.choices[0].logprobs
    assert (lp.token_logprobs, lp.top_logprobs, lp.text_offset) == ([None], [None], [0])
    assert (one.usage.prompt_tokens, one.usage.completion_tokens) == (1, 0)


@pytest.mark.parametrize("body, param, words", [
    ({"prompt": "x", "max_tokens": 0}, "max_tokens", "'max_tokens' 0 generates nothing"),
    ({"prompt": "x", "max_tokens": 0, "logprobs": 1}, "max_tokens", "without 'echo'"),
    ({"prompt": "x", "echo": True, "max_tokens": 0, "logprobs": 21}, "logprobs", "got 21"),
    ({"prompt": "x", "echo": True, "max_tokens": -1, "logprobs": 1}, "max_tokens", "got -1"),
    ({"prompt": "x", "echo": True, "max_tokens": 0, "suffix": "y"}, "echo", "'echo' with 'suffix'"),
    ({"prompt": "x", "echo": "yes", "max_tokens": 0}, "echo", "'echo'"),
])
def test_bad_combinations_are_a_400(tiny_scoring, body, param, words):
    _, port, _ = tiny_scoring
    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"]


def test_default_model_scores_as_its_decode_steps(default_model_path, tmp_path):
    """The default model (quantized, f16 KV): the server's scores against the engine's own decode steps over the
    same tokens, teacher-forced, one token at a time (one thread each, as the server here runs)."""
    from strata.engine import Engine

    with serving(["--model", str(default_model_path), "--ctx", "1024"], tmp_path) as (port, _):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
        r = client.completions.create(model="m", prompt=TEXT, echo=True, max_tokens=0, logprobs=1)
        tokens = prompt_ids(default_model_path, TEXT)
    lp = r.choices[0].logprobs
    check_scored(lp, tokens, TEXT)
    e = Engine(str(default_model_path), n_ctx=1024, n_threads=1)
    rows = np.stack([e.decode([0], [t])[0] for t in tokens[:-1]])
    want = log_softmax(rows)[np.arange(len(tokens) - 1), tokens[1:]]
    got = np.array(lp.token_logprobs[1:])
    # Engine.extend is bitwise equal to decode steps (1.8e-15 seen: the log-softmax's float64 rounding)
    assert np.abs(got - want).max() < 1e-5, np.abs(got - want).max()
    assert all(math.isfinite(x) and x <= 0 for x in got)
    assert [next(iter(a)) for a in lp.top_logprobs[1:]] == [
        e.tokenizer.token_bytes(int(np.argmax(row))).decode("utf-8", "replace") for row in rows]


def test_a_scored_history_serves_a_later_ordinary_request(tiny_scoring):
    """What scoring leaves in its context (Engine.extend's KV) is the prompt's history like any other: an ordinary
    request that goes on from it reuses it, and answers as a prompt read whole does (scored, so nothing reused)."""
    client, _, _ = tiny_scoring
    prompt = TEXT + " Once more:"
    client.completions.create(model="m", prompt=prompt, echo=True, max_tokens=0, logprobs=0)
    after = client.completions.create(model="m", prompt=prompt + " the", max_tokens=6, temperature=0, logprobs=1,
                                      extra_body={"ignore_eos": True})
    assert after.usage.prompt_tokens_details.cached_tokens >= after.usage.prompt_tokens - 3
    whole = client.completions.create(model="m", prompt=prompt + " the", max_tokens=6, temperature=0, logprobs=1,
                                      echo=True, extra_body={"ignore_eos": True})
    assert whole.usage.prompt_tokens_details.cached_tokens == 0
    n = whole.usage.prompt_tokens
    assert whole.choices[0].text == prompt + " the" + after.choices[0].text
    assert whole.choices[0].logprobs.token_logprobs[n:] == pytest.approx(after.choices[0].logprobs.token_logprobs,
                                                                         abs=2e-3)


def test_a_bos_the_tokenizer_added_takes_no_text(tiny_model_factory, tmp_path):
    """A model that starts a text prompt with BOS (Llama, Gemma, Mistral): the echo is the text as sent, so the BOS
    entry (the first: null) stands at offset 0 with no characters, and every other token's text_offset indexes the
    echoed text (choices[0].text[offset:] starts with the token), the generated tokens' too."""
    model = tiny_model_factory(ctx_len=2048, n_vocab=512, seed=3, add_bos=True)
    text = "Once upon a time"
    ids = prompt_ids(model, text)
    with serving(["--model", str(model), "--ctx", "1024"], tmp_path) as (port, _):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
        answers = [client.completions.create(model="m", prompt=text, echo=True, max_tokens=n, logprobs=1,
                                             temperature=0, extra_body={"ignore_eos": True}) for n in (0, 3)]
        streamed = [ch.choices[0] for ch in client.completions.create(
            model="m", prompt=text, echo=True, max_tokens=3, logprobs=1, temperature=0, stream=True,
            extra_body={"ignore_eos": True}) if ch.choices and ch.choices[0].logprobs]
    from strata.engine import Engine

    assert ids[0] == Engine(str(model), n_ctx=64, n_threads=1).tokenizer.bos_id     # the tokenizer added it
    for r in answers:
        c = r.choices[0]
        lp = c.logprobs
        assert c.text.startswith(text) and len(lp.tokens) == len(ids) + r.usage.completion_tokens
        assert lp.text_offset[0] == 0 and lp.token_logprobs[0] is None
        if r.usage.completion_tokens:   # the answer's first token: where the echo ends
            assert lp.text_offset[len(ids)] == len(text)
        for tok, at in zip(lp.tokens[1:], lp.text_offset[1:], strict=True):
            assert tok.startswith("bytes:") or c.text[at:].startswith(tok), (tok, at, c.text)   # part of a character
    offsets = [o for ch in streamed for o in ch.logprobs.text_offset]
    assert offsets == answers[1].choices[0].logprobs.text_offset
