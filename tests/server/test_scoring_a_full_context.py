"""A prompt of exactly --ctx tokens scored on `/v1/completions` (`echo`, `logprobs`, `max_tokens: 0`:
lm-eval-harness's loglikelihood of a full-context window) through the real `openai` SDK on a real `strata serve`
(the tiny model, --ctx 2048, slots of 256): nothing is generated, so it fits; its scores are the reference forward's, it is never
parked into the conversation cache, and the server answers as before after it. A prompt that leaves no room for
the tokens it asks to generate is still the too-long 400."""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
import numpy as np
import openai
import pytest
from strata.engine.sampling import SamplingParams
from strata.server.context_choice import fits
from strata.server.jobs import Job
from strata.server.prompting import check_fits

from tests.fixtures.reference import reference_logits
from tests.server.test_auth_and_lifecycle import serving
from tests.server.test_prompt_scoring import log_softmax

CTX, SLOT_CTX = 2048, 256


@pytest.fixture(scope="module")
def small_ctx(tiny_model, tmp_path_factory):
    """strata serve on the tiny model, --ctx 2048, two slots of 256, a conversation cache."""
    tmp = tmp_path_factory.mktemp("full_ctx")
    with serving(["--model", str(tiny_model), "--ctx", str(CTX), "--batch", "2", "--slot-ctx", str(SLOT_CTX),
                  "--conversation-cache-cold-dir", str(tmp / "cold")], tmp) as (port, _):
        yield (openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120),
               port, tiny_model)


def ids(n: int, start: int = 0) -> list[int]:
    """`n` token ids of the tiny model's 512 (none of its first few: BOS, EOS and the like)."""
    return [10 + (start + 7 * i) % 480 for i in range(n)]


def parks(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("strata_cache_parks_total{") and 'destination="discard"' not in line)


@pytest.mark.parametrize("n", [CTX, SLOT_CTX])
def test_a_prompt_of_the_whole_context_is_scored(small_ctx, n):
    """--ctx tokens (main holds no more) and --slot-ctx tokens (a slot holds no more): both scored whole."""
    client, port, model = small_ctx
    prompt = ids(n, start=n)
    r = client.completions.create(model="m", prompt=prompt, echo=True, max_tokens=0, logprobs=1)
    c = r.choices[0]
    assert c.finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (n, 0, n)
    assert len(c.logprobs.token_logprobs) == n and c.logprobs.token_logprobs[0] is None
    ref = reference_logits(model, prompt)[:-1]
    want = log_softmax(ref)[np.arange(n - 1), prompt[1:]]
    tol = 2 * 3e-3 * np.abs(ref).max(axis=1)     # f16 KV, as test_prompt_scoring's
    assert np.all(np.abs(np.array(c.logprobs.token_logprobs[1:]) - want) <= tol)
    streamed = list(client.completions.create(model="m", prompt=prompt, echo=True, max_tokens=0, logprobs=1,
                                              stream=True))
    assert [ch.choices[0].logprobs.token_logprobs for ch in streamed] == [c.logprobs.token_logprobs]


def test_it_is_never_parked_and_the_server_goes_on(small_ctx):
    """Scored whole contexts one after another, each displacing the one before: none parked; then ordinary
    requests are answered, generating to the context's end as before."""
    client, port, _ = small_ctx
    before = parks(port)
    for i in range(3):
        r = client.completions.create(model="m", prompt=ids(CTX, start=i), echo=True, max_tokens=0, logprobs=0)
        assert r.usage.prompt_tokens == CTX
    assert parks(port) == before
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code == 200
    r = client.completions.create(model="m", prompt=ids(CTX - 4), max_tokens=16, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert (r.choices[0].finish_reason, r.usage.completion_tokens) == ("length", 4)   # cut at the context's end
    r = client.completions.create(model="m", prompt="Once upon a time", max_tokens=3, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 3


@pytest.mark.parametrize("n, extra", [
    (CTX, {"max_tokens": 1}),                               # one to generate: no room for it
    (CTX, {"max_tokens": 1, "echo": True, "logprobs": 1}),   # scored, generating one
    (CTX, {}),                                               # max_tokens left out: 16
    (CTX + 1, {"max_tokens": 0, "echo": True, "logprobs": 1}),
])
def test_a_prompt_without_room_for_its_answer_is_refused_as_before(small_ctx, n, extra):
    _, port, _ = small_ctx
    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": ids(n), **extra}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["param"], err["code"]) == ("prompt", "context_length_exceeded")
    assert err["message"].startswith(f"This model's maximum context length is {CTX} tokens. However, the prompt "
                                     f"is {n} tokens")


def test_a_text_of_the_whole_context_is_scored(small_ctx):
    """As text, through the size bound that refuses a prompt before it is tokenized (prompting.fits_check)."""
    client, _, _ = small_ctx
    from strata.engine import Engine

    engine = Engine(str(small_ctx[2]), n_ctx=64, n_threads=1)
    long = "The quick brown fox jumps over the lazy dog. " * 400

    def count(k: int) -> int:
        return len(engine.tokenize(long[:k], special=True))

    lo, hi = 0, len(long)               # the shortest start of `long` of CTX tokens or more
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if count(mid) < CTX else (lo, mid)
    text = next(long[:k] for k in range(lo - 8, lo + 8) if count(k) == CTX)
    r = client.completions.create(model="m", prompt=text, echo=True, max_tokens=0, logprobs=0)
    assert (r.choices[0].text, r.usage.prompt_tokens) == (text, CTX)


def test_a_slot_of_its_size_takes_it_beside_main(small_ctx):
    """A scored prompt of --slot-ctx tokens runs in a slot while main answers another request (it waited for
    main before, as a prompt too long for a slot)."""
    client, port, _ = small_ctx
    base = f"http://127.0.0.1:{port}"
    long = {"prompt": ids(SLOT_CTX + 40), "max_tokens": CTX - SLOT_CTX - 41, "ignore_eos": True, "temperature": 0}
    ended: list[float] = []
    main = threading.Thread(target=lambda: (httpx.post(base + "/v1/completions", json=long, timeout=300),
                                            ended.append(time.monotonic())))
    main.start()
    try:
        while not ended and next(c["state"] for c in httpx.get(base + "/v1/slots", timeout=30).json()["slots"]
                                 if c["id"] == "main") != "decode":
            time.sleep(0.01)
        r = client.completions.create(model="m", prompt=ids(SLOT_CTX, start=5), echo=True, max_tokens=0, logprobs=0)
        done = time.monotonic()
        assert r.usage.prompt_tokens == SLOT_CTX
        slots = httpx.get(base + "/v1/slots", timeout=30).json()
    finally:
        main.join(300)
    assert ended and done < ended[0], "the scored prompt waited for main"
    held = [s for s in slots["slots"] if s["id"] != "main" and s["tokens"] == SLOT_CTX == s["capacity"]]
    assert held, slots


def test_the_room_an_answer_needs():
    """Pure: a prompt only scored (max_tokens 0) may fill a context, any other leaves one token; room is 0 or 1."""
    def job(n: int, max_tokens: int) -> Job:
        return Job(api="openai", prompt=[1] * n, max_tokens=max_tokens, sampling=SamplingParams())

    assert fits(job(8, 0), 8) and not fits(job(8, 1), 8) and not fits(job(9, 0), 8)
    assert fits(job(7, 16), 8)
    check_fits(8, 8, room=0)
    with pytest.raises(Exception, match="the prompt is 8 tokens"):
        check_fits(8, 8)
    with pytest.raises(ValueError, match="room must be 0"):
        check_fits(1, 8, room=2)
