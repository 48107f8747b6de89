"""Several prompts in one `/v1/completions` request (`prompt` as an array, lm-eval-harness's batches) through the
real `openai` SDK on a real `strata serve` in a subprocess: one choice per prompt, in order, each what the prompt
alone answers (scored or generated, text or token ids), the usage summed; a bad prompt among them is a 400 naming
its position, nothing run."""

from __future__ import annotations

import json
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
    ({"prompt": ["a", [10 ** 9]], "max_tokens": 1, "stream": True}, "prompt", "prompt 1 of the 2 in 'prompt'"),
    ({"prompt": ["a", "b"], "max_tokens": 1, "suffix": "c"}, "suffix", "has no fill-in-the-middle tokens"),
    ({"prompt": ["a", "b"], "max_tokens": 1, "logprobs": 21}, "logprobs", "got 21"),
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


def requests_total(base: str, series: str = "strata_requests_total{") -> int:
    """The server's count of requests ended (its /metrics), summed over the series that start with `series`."""
    lines = httpx.get(base + "/metrics", timeout=30).text.splitlines()
    return sum(int(float(line.split()[-1])) for line in lines if line.startswith(series))


def cancelled(base: str) -> int:
    return requests_total(base, 'strata_requests_total{status="cancelled"}')


def test_a_client_that_leaves_ends_the_prompts_left(list_server):
    """The prompts after the one running when the client left are not run: each was started and then cancelled a
    check later (0.25 s), one after another, for as many as the list held."""
    _, port, _ = list_server
    base = f"http://127.0.0.1:{port}"

    before = cancelled(base)
    body = {"prompt": [f"story {i}:" for i in range(60)], "max_tokens": 1000, "ignore_eos": True}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(base + "/v1/completions", json=body, timeout=1.5)
    time.sleep(2)
    left = cancelled(base)
    time.sleep(3)
    assert cancelled(base) == left <= before + 1, (before, left, cancelled(base))   # the one running when it left


def streamed(client, prompt, **kw) -> tuple[dict[int, list], list]:
    """A streamed list through the SDK: each index's choices in the order they came, and every chunk."""
    chunks = list(client.completions.create(model="m", prompt=prompt, stream=True, **kw))
    by_index: dict[int, list] = {}
    for ch in chunks:
        for c in ch.choices:
            by_index.setdefault(c.index, []).append(c)
    return by_index, chunks


def test_a_streamed_list_answers_each_prompt_as_its_choice(list_server):
    """OpenAI's stream of a prompt list: each prompt's chunks with `index` its position, one prompt after another;
    greedy, the texts are the answer not streamed; the usage once at the end, summed."""
    client, _, model = list_server
    kw = dict(max_tokens=5, temperature=0, extra_body={"ignore_eos": True})
    for prompts in (PROMPTS, [prompt_ids(model, p) for p in PROMPTS]):
        whole = alone(client, prompts, **kw)
        by_index, chunks = streamed(client, prompts, stream_options={"include_usage": True}, **kw)
        order = [c.index for ch in chunks for c in ch.choices]
        assert order == sorted(order) and sorted(by_index) == [0, 1, 2]       # one prompt after another
        for c in whole.choices:
            got = by_index[c.index]
            assert "".join(g.text for g in got) == c.text
            assert [g.finish_reason for g in got][-1] == c.finish_reason == "length"
        usages = [ch.usage for ch in chunks if ch.usage is not None]
        assert len(usages) == 1 and chunks[-1].usage is not None and not chunks[-1].choices
        u = usages[0]
        assert (u.prompt_tokens, u.completion_tokens, u.total_tokens) == (
            whole.usage.prompt_tokens, 15, whole.usage.prompt_tokens + 15)


def test_a_streamed_list_is_scored_each_in_order(list_server):
    """lm-eval-harness's loglikelihood batch streamed: one chunk per prompt (its echo and scores), then [DONE];
    without include_usage each prompt's last chunk carries its own usage, as one prompt's does."""
    client, port, _ = list_server
    kw = dict(echo=True, max_tokens=0, logprobs=1)
    whole = alone(client, PROMPTS, **kw)
    by_index, chunks = streamed(client, PROMPTS, **kw)
    assert [c.index for ch in chunks for c in ch.choices] == [0, 1, 2]
    for c in whole.choices:
        (got,) = by_index[c.index]
        assert (got.text, got.finish_reason) == (c.text, "length")
        assert got.logprobs.token_logprobs == c.logprobs.token_logprobs
        assert got.logprobs.text_offset == c.logprobs.text_offset
    assert sum(ch.usage.prompt_tokens for ch in chunks) == whole.usage.prompt_tokens
    with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", timeout=60,
                      json={"prompt": PROMPTS, "stream": True, **kw}) as s:
        events = [line[len("data: "):] for line in s.iter_lines() if line.startswith("data: ")]
    assert len(events) == 4 and events[-1] == "[DONE]"


def test_a_client_that_leaves_a_streamed_list_ends_the_prompts_left(list_server):
    """A client that stops reading mid-list and closes: the prompt running is cancelled, those after it never run."""
    _, port, _ = list_server
    base = f"http://127.0.0.1:{port}"

    before, ran = cancelled(base), requests_total(base)
    body = {"prompt": [f"story {i}:" for i in range(60)], "max_tokens": 1000, "ignore_eos": True, "stream": True}
    indices = set()
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=60) as s:
        for line in s.iter_lines():
            if line.startswith("data: {"):
                indices.add(json.loads(line[len("data: "):])["choices"][0]["index"])
                if len(indices) == 2:      # the second prompt has begun: leave
                    break
    deadline = time.monotonic() + 60      # seen by the server at its next token's write: no fixed wait on a loaded CI
    while cancelled(base) == before and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3)                         # a prompt after it would start (and be cancelled) within this
    assert cancelled(base) == before + 1, (before, cancelled(base))   # the one running when it left
    assert requests_total(base) == ran + 2                            # and the one before it: no others


def test_several_code_completions_with_one_suffix(tiny_model_factory, tmp_path):
    """`suffix` with a prompt list (as OpenAI's models that take a suffix answer it): each prompt a code completion
    with that suffix, each what it answers alone, streamed or not; a prompt that is not text a 400 naming it."""
    from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model

    plain = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, added_tokens=FIM_TEXTS)
    coder = fim_model(plain, tmp_path / "coder.gguf")
    with serving(["--model", str(coder), "--ctx", "2048", "--batch", "2", "--slot-ctx", "1024"], tmp_path) as (port, _):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
        prefixes = ["def area(r):\n    return ", "def f(x):\n    y = "]
        kw = dict(suffix="\n\nprint(area(2))\n", max_tokens=4, temperature=0)
        r = alone(client, prefixes, **kw)
        singles = [alone(client, p, **kw).choices[0] for p in prefixes]
        assert [(c.index, c.text, c.finish_reason) for c in r.choices] == [
            (i, s.text, s.finish_reason) for i, s in enumerate(singles)]
        by_index, _ = streamed(client, prefixes, **kw)
        assert ["".join(c.text for c in by_index[i]) for i in (0, 1)] == [s.text for s in singles]
        bad = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60,
                         json={"prompt": ["def f():", [1, 2]], "suffix": "x", "max_tokens": 1})
        assert bad.status_code == 400, bad.text
        err = bad.json()["error"]
        assert err["param"] == "prompt" and err["message"].startswith("prompt 1 of the 2 in 'prompt': 'prompt' must be")


def test_a_later_prompt_failing_unstarted_sends_its_error_and_no_echo(tiny_model, tmp_path):
    """A streamed list with `echo` whose second prompt was waiting when the server stopped: that prompt ended
    unstarted (503, 'the server is stopping'), and the stream ends with its error event; no echo chunk of it comes
    first, as if it had begun (one prompt alone answers such a failure with a status, nothing sent). --batch 0:
    one request at a time; another request sent while the first prompt generates (8,000 tokens: seconds) runs
    before the second prompt, which is submitted only once the first has ended."""
    import threading

    from tests.server.test_auth_and_lifecycle import listening_port, start_cli, stop_server, wait_healthy

    proc, log = start_cli(["--model", str(tiny_model), "--ctx", "32768", "--batch", "0"], tmp_path)
    running, release = threading.Event(), threading.Event()

    def other_request(url: str) -> None:
        body = {"prompt": "an other request", "max_tokens": 20000, "ignore_eos": True, "temperature": 1.0,
                "stream": True}
        with httpx.stream("POST", url, json=body, timeout=300) as o:
            lines = o.iter_lines()         # held: a generator dropped closes the stream
            next(line for line in lines if line.startswith("data: {"))
            running.set()
            release.wait(300)

    try:
        port = listening_port(log, proc)
        wait_healthy(port, proc)
        url = f"http://127.0.0.1:{port}/v1/completions"
        listed = {"prompt": ["first prompt", "second prompt"], "echo": True, "max_tokens": 8000, "ignore_eos": True,
                  "temperature": 1.0, "stream": True}
        events: list[str] = []
        with httpx.stream("POST", url, json=listed, timeout=300) as s:
            lines = s.iter_lines()
            events.append(next(line for line in lines if line.startswith("data: {")))   # prompt 0 runs in main
            other = threading.Thread(target=other_request, args=(url,), daemon=True)
            other.start()                                       # waits behind it, runs before prompt 1
            for line in lines:
                events.append(line)
                if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["finish_reason"]:
                    break                                       # prompt 0 ended
            assert running.wait(120)                            # the other runs: prompt 1 waits
            proc.terminate()                                    # the clean stop: prompt 1 ends unstarted
            events += [line for line in lines if line.startswith("data: ")]
        release.set()
        other.join(60)
    finally:
        release.set()
        stop_server(proc)
    chunks = [json.loads(e[6:]) for e in events if e.startswith("data: {")]
    assert chunks[-1].get("error", {}).get("message") == "the server is stopping", json.dumps(chunks[-2:])
    assert [c["choices"][0]["index"] for c in chunks[:-1]] == [0] * (len(chunks) - 1), json.dumps(chunks[-2:])
