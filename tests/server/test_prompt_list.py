"""Several prompts in one `/v1/completions` request (`prompt` as an array, lm-eval-harness's batches) through the
real `openai` SDK on a real `strata serve` in a subprocess: one choice per prompt, in order, each what the prompt
alone answers (scored or generated, text or token ids), the usage summed; a bad prompt among them is a 400 naming
its position, nothing run."""

from __future__ import annotations

import time

import httpx2 as httpx
import openai
import pytest
from strata.server.prompt_list import MAX_PROMPTS

from tests.server.test_auth_and_lifecycle import serving
from tests.server.test_prompt_scoring import prompt_ids

PROMPTS = ["Once upon a time", "The quick brown fox jumps over", "A B C D E F"]


@pytest.fixture(scope="module")
def list_server(tiny_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prompt_list")
    with serving(["--model", str(tiny_model), "--ctx", "2048", "--batch", "2", "--slot-ctx", "1024"], tmp) as (port, _):
        yield (openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120),
               port, tiny_model)


def alone(client, prompt, **kw):
    return client.completions.create(model="m", prompt=prompt, **kw)


def test_several_prompts_are_scored_each_in_order(list_server):
    """lm-eval-harness's loglikelihood batch: echo, max_tokens 0, logprobs; each choice is its prompt's scores."""
    client, _, _ = list_server
    kw = dict(echo=True, max_tokens=0, logprobs=1)
    r = alone(client, PROMPTS, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    singles = [alone(client, p, **kw) for p in PROMPTS]
    for c, s in zip(r.choices, singles, strict=True):
        assert c.text == s.choices[0].text and c.finish_reason == "length"
        assert c.logprobs.token_logprobs == s.choices[0].logprobs.token_logprobs
        assert c.logprobs.tokens == s.choices[0].logprobs.tokens
        assert c.logprobs.text_offset == s.choices[0].logprobs.text_offset
    assert r.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
    assert (r.usage.completion_tokens, r.usage.total_tokens) == (0, r.usage.prompt_tokens)


def test_several_prompts_generate_each_in_order(list_server):
    client, _, model = list_server
    kw = dict(max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
    ids = [prompt_ids(model, p) for p in PROMPTS]
    r = alone(client, ids, **kw)                       # token-id arrays, as lm-eval-harness sends them
    singles = [alone(client, p, **kw) for p in PROMPTS]
    assert [(c.index, c.text) for c in r.choices] == [(i, s.choices[0].text) for i, s in enumerate(singles)]
    assert r.usage.completion_tokens == 4 * len(PROMPTS)
    assert r.usage.prompt_tokens == sum(len(t) for t in ids)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


@pytest.mark.parametrize("body, param, words", [
    ({"prompt": ["fine", [10 ** 9]], "max_tokens": 1}, "prompt", "prompt 1 of the 2 in 'prompt'"),
    ({"prompt": ["x"] * (MAX_PROMPTS + 1), "max_tokens": 1}, "prompt", f"holds {MAX_PROMPTS + 1} prompts"),
    ({"prompt": ["a", "b"], "max_tokens": 1, "stream": True}, "stream", "'stream' with 2 prompts"),
    ({"prompt": ["a", "b"], "max_tokens": 1, "suffix": "c"}, "suffix", "'suffix' with 2 prompts"),
])
def test_a_bad_list_is_a_400_naming_it(list_server, body, param, words):
    _, port, _ = list_server
    before = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"], err
    after = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    ok = [line for line in after.splitlines() if line.startswith("strata_requests_total")]
    assert ok == [line for line in before.splitlines() if line.startswith("strata_requests_total")]   # none ran


def token_id(model, text: str) -> int:
    """The one vocabulary id whose text (as the logprobs write it) is `text`."""
    from strata.engine import Engine
    from strata.server.openai_api import token_text

    engine = Engine(str(model), n_ctx=64, n_threads=1)
    tok = engine.tokenizer
    ids = [i for i in range(engine.n_vocab) if token_text(tok.token_bytes(i)) == text]
    assert len(ids) == 1, (text, ids)
    return ids[0]


def lm_eval_parse(choices: list[dict], ctxlens: list[int]) -> list[tuple[float, bool]]:
    """lm-eval-harness's openai-completions parse_logprobs (0.4): the continuation's summed log-probability and
    whether every one of its tokens was the likeliest, read from the request's echoed prompt entries."""
    out = []
    for choice, ctxlen in zip(sorted(choices, key=lambda c: c["index"]), ctxlens, strict=True):
        lps = choice["logprobs"]["token_logprobs"][ctxlen:-1]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:-1]
        out.append((sum(lps), all(lp == max(top.values()) for lp, top in zip(lps, tops, strict=True))))
    return out


def test_lm_eval_harness_reads_a_batch(list_server):
    """Its loglikelihood batch as it sends it: token ids (context + continuation), echo, max_tokens 1, logprobs 1,
    temperature 0; a greedy continuation reads as greedy, another not, and the sums are the tokens' own."""
    client, port, model = list_server
    ctx = prompt_ids(model, "Once upon a time")
    greedy = alone(client, [ctx], max_tokens=3, temperature=0, logprobs=0,
                   extra_body={"ignore_eos": True}).choices[0].logprobs.tokens
    greedy_ids = [token_id(model, t) for t in greedy]
    other = [t + 1 for t in greedy_ids]
    body = {"prompt": [ctx + greedy_ids, ctx + other], "echo": True, "max_tokens": 1, "logprobs": 1,
            "temperature": 0}
    r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    choices = r.json()["choices"]
    (lp_greedy, is_greedy), (lp_other, other_greedy) = lm_eval_parse(choices, [len(ctx), len(ctx)])
    assert (is_greedy, other_greedy) == (True, False)
    assert lp_greedy > lp_other
    assert lp_greedy == sum(choices[0]["logprobs"]["token_logprobs"][len(ctx):len(ctx) + 3])


def test_a_client_that_leaves_ends_the_prompts_left(list_server):
    """The prompts after the one running when the client left are not run: each was started and then cancelled a
    check later (0.25 s), one after another, for as many as the list held."""
    _, port, _ = list_server
    base = f"http://127.0.0.1:{port}"

    def cancelled() -> int:
        lines = httpx.get(base + "/metrics", timeout=30).text.splitlines()
        return sum(int(float(line.split()[-1])) for line in lines
                   if line.startswith('strata_requests_total{status="cancelled"}'))

    before = cancelled()
    body = {"prompt": [f"story {i}:" for i in range(60)], "max_tokens": 1000, "ignore_eos": True}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(base + "/v1/completions", json=body, timeout=1.5)
    time.sleep(2)
    left = cancelled()
    time.sleep(3)
    assert cancelled() == left <= before + 1, (before, left, cancelled())   # the one running when it left
