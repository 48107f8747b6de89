"""A prompt of exactly --ctx tokens scored on `/v1/completions` (`echo`, `logprobs`, `max_tokens: 0`:
lm-eval-harness's loglikelihood of a full-context window) through the real `openai` SDK on a real `strata serve`
(the tiny model, --ctx 2048, slots of 256): nothing is generated, so it fits; its scores are the reference forward's, it is never
parked into the conversation cache, and the server answers as before after it. A prompt that leaves no room for
the tokens it asks to generate is still the too-long 400."""

from __future__ import annotations

import httpx2 as httpx
import numpy as np
import openai
import pytest
from strata.engine.sampling import SamplingParams
from strata.server.context_choice import fits
from strata.server.jobs import Job, answer_room
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


def test_a_prompt_of_the_whole_context_is_scored(small_ctx):
    """--ctx tokens, as many as main holds, scored whole (alone, it runs in main; one of --slot-ctx tokens that
    fills a slot: test_a_slot_of_its_size_takes_it_beside_main)."""
    client, port, model = small_ctx
    n = CTX
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


def placed(base: str, request: int) -> dict:
    """/v1/slots' decision placing `request` (not a park it made)."""
    decisions = httpx.get(base + "/v1/slots", timeout=30).json()["decisions"]
    return next(d for d in reversed(decisions) if d["request"] == request and not d["park"] and not d["park_skip"])


def test_a_slot_of_its_size_takes_it_beside_main(tiny_model, tmp_path):
    """A scored prompt of --slot-ctx tokens that arrives while main generates runs in a slot beside it, filling the
    slot, and is scored as the reference scores it (before, as a prompt too long for a slot, it waited for main's
    request to end, then ran in main). No timing is asserted: main generates to a --ctx of 32768 (tens of seconds,
    where 2048 ended in half a second, which a loaded machine's scored request could come after), its stream held
    open until the scored answer came, and the placement decision says where that ran."""
    with serving(["--model", str(tiny_model), "--ctx", "32768", "--batch", "2", "--slot-ctx", str(SLOT_CTX)],
                 tmp_path) as (port, _):
        base = f"http://127.0.0.1:{port}"
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=300)
        generate = {"prompt": ids(SLOT_CTX + 40), "max_tokens": 32768, "ignore_eos": True, "temperature": 1.0,
                    "stream": True}
        prompt = ids(SLOT_CTX, start=5)
        with httpx.stream("POST", base + "/v1/completions", json=generate, timeout=300) as main:
            assert main.status_code == 200
            lines = main.iter_lines()      # held: a generator dropped closes the stream, which ends main's request
            next(line for line in lines if line.startswith("data: {"))   # main is decoding
            raw = client.completions.with_raw_response.create(model="m", prompt=prompt, echo=True, max_tokens=0,
                                                              logprobs=0)
            where = placed(base, int(raw.headers["X-Strata-Request"]))
            slots = httpx.get(base + "/v1/slots", timeout=30).json()["slots"]
    assert where["slot"] != "main", f"it ran in main ({where['reason']}), after main's request: {where}"
    assert next(s for s in slots if s["id"] == where["slot"])["tokens"] == SLOT_CTX, slots
    r = raw.parse()
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (SLOT_CTX, 0)
    ref = reference_logits(tiny_model, prompt)[:-1]
    want = log_softmax(ref)[np.arange(SLOT_CTX - 1), prompt[1:]]
    tol = 2 * 3e-3 * np.abs(ref).max(axis=1)
    assert np.all(np.abs(np.array(r.choices[0].logprobs.token_logprobs[1:]) - want) <= tol)


def test_the_room_an_answer_needs():
    """Pure: a prompt only scored (max_tokens 0) may fill a context, any other leaves one token; room is 0 or 1."""
    def job(n: int, max_tokens: int) -> Job:
        return Job(api="openai", prompt=[1] * n, max_tokens=max_tokens, sampling=SamplingParams())

    assert fits(job(8, 0), 8) and not fits(job(8, 1), 8) and not fits(job(9, 0), 8)
    assert fits(job(7, 16), 8)
    assert (answer_room(0), answer_room(1), answer_room(16)) == (0, 1, 1)   # the one rule both use
    check_fits(8, 8, room=0)
    with pytest.raises(Exception, match="the prompt is 8 tokens"):
        check_fits(8, 8)
    with pytest.raises(ValueError, match="room must be 0"):
        check_fits(1, 8, room=2)
