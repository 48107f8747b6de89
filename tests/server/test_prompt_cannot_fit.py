"""A prompt that cannot fit the context is refused before it is tokenized (session 40's hostile-client trial: eight
10 MB prompts at once kept a small chat waiting 78 s, the worker threads all tokenizing, seconds each). A text of
N bytes is at least ceil(N / the vocabulary's longest token in bytes) tokens: past the context that is the usual
too-long 400, at once. `strata serve` in a subprocess with the default model, as in the trial."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx2 as httpx
import pytest

from tests.server.test_auth_and_lifecycle import serving


@pytest.fixture(scope="module")
def url(default_model_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cannot_fit")
    with serving(["--model", str(default_model_path), "--ctx", "4096", "--batch", "1",
                  "--conversation-cache-mib", "0"], tmp) as (port, _):
        yield f"http://127.0.0.1:{port}"


HUGE = "hello there " * 870_000     # 10 MB
CANNOT_FIT = [
    ("/v1/chat/completions", {"max_tokens": 1, "messages": [{"role": "user", "content": HUGE}]},
     "This model's maximum context length is 4096 tokens. However, the prompt is at least "),
    ("/v1/completions", {"max_tokens": 1, "prompt": HUGE},
     "This model's maximum context length is 4096 tokens. However, the prompt is at least "),
    ("/completion", {"n_predict": 1, "prompt": HUGE},
     "This model's maximum context length is 4096 tokens. However, the prompt is at least "),
    ("/v1/messages", {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": HUGE}]},
     "prompt is too long: "),
    ("/v1/responses", {"model": "m", "max_output_tokens": 16, "input": HUGE},
     "This model's maximum context length is 4096 tokens. However, the prompt is at least "),
    ("/v1/responses", {"model": "m", "max_output_tokens": 16,
                       "input": [{"role": "user", "content": HUGE}, {"type": "compaction_trigger"}]},
     "This model's maximum context length is 4096 tokens. However, the prompt is at least "),
    ("/v1/chat/completions", {"max_tokens": 1, "stream": True, "messages": [{"role": "user", "content": HUGE}]},
     "This model's maximum context length is 4096 tokens. However, the prompt is at least "),
    ("/v1/messages", {"model": "m", "max_tokens": 1, "stream": True,
                      "messages": [{"role": "user", "content": HUGE}]}, "prompt is too long: "),
]


def test_prompts_that_cannot_fit_are_refused_before_tokenizing(url):
    """Every endpoint that runs a prompt refuses one of 10 MB at once, in its API's too-long wording, eight at a
    time, and a small chat sent meanwhile answers in time."""
    small: dict = {}

    def small_chat() -> None:
        time.sleep(3)                   # the big ones read, their tokenizing (before) under way
        t = time.monotonic()
        r = httpx.post(url + "/v1/chat/completions", timeout=60,
                       json={"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
        small.update(status=r.status_code, took=time.monotonic() - t)

    def big(case: tuple) -> tuple[httpx.Response, float, str]:
        path, body, said = case
        t = time.monotonic()
        r = httpx.post(url + path, json=body, timeout=300)
        return r, time.monotonic() - t, said

    th = threading.Thread(target=small_chat)
    th.start()
    with ThreadPoolExecutor(len(CANNOT_FIT)) as pool:
        answers = list(pool.map(big, CANNOT_FIT))
    th.join()
    took = [round(a[1], 1) for a in answers]
    assert small.get("status") == 200 and small["took"] < 5, (small, took)
    assert max(took) < 10, took          # each refused at once, not after tokenizing (seconds a megabyte)
    for r, _, said in answers:
        assert r.status_code == 400 and said in r.json()["error"]["message"], r.text[:300]
        assert r.json()["error"].get("code") in ("context_length_exceeded", None), r.text[:300]
