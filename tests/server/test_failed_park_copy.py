"""A failure while placing a request (here the engine's copy that parks main's conversation into a slot)
fails nothing for good: the park falls back to the conversation cache and the request runs. Before, the
exception escaped `_assign` outside the per-request error handling: the request stayed waiting and every
step raised again (a hot loop that failed any other running request with the same internal error), so
the request never got an answer. The one injected fault is the engine's copy raising (a real copy
refuses only what the placer no longer offers, 31e1278); everything else is the live tiny server."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from .conftest import TINY_CTX
from .live import LiveServer, run_together

FIRST = [(i * 7) % 400 + 50 for i in range(1900)]   # worth parking, and it fits a 2,048-token slot


def complete(url: str, prompt: list[int]) -> dict:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2, "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def server(tiny_model, tmp_path):
    s = LiveServer(model=str(tiny_model), ctx=TINY_CTX, batch=2, slot_ctx=2048, threads=1,
                   conversation_cache_cold_dir=str(tmp_path / "cold"), conversation_cache_mib=64)
    s.start()
    yield s
    s.stop()


def test_a_park_whose_copy_fails_goes_to_the_cache_and_the_request_runs(server):
    engine = server.state.scheduler.engine
    failed = []

    def copy_failing(src: int, dst: int, n: int) -> None:
        failed.append((src, dst, n))
        raise RuntimeError("copy failed (injected)")

    complete(server.url, FIRST)                       # alone: main
    engine.copy = copy_failing
    other = complete(server.url, [60, 61, 62, 63])    # another conversation displaces main: the park's copy fails
    assert other["usage"]["completion_tokens"] == 2
    assert [src for src, _, _ in failed] == [0], len(failed)   # the park from main, tried once (not in a loop)
    again = complete(server.url, FIRST + [70, 71, 72])    # main's history went to the cache instead
    assert again["timings"]["cache_n"] >= len(FIRST) - 1, again["timings"]
    health = httpx.get(server.url + "/health", timeout=30)
    assert health.status_code == 200


def test_a_failure_placing_a_request_fails_that_request_alone_and_once(server):
    """Before, the failure escaped to the step's handler, which failed the requests already running (here
    the other one, placed just before) and left the failing one queued, to be placed again next step."""
    placer = server.state.scheduler.placer
    real_pick, prompts = placer.pick, []

    def pick_failing_second(prompt, *args, **kwargs):
        prompts.append(list(prompt))
        if len(prompts) == 2:
            raise RuntimeError("pick failed (injected)")
        return real_pick(prompt, *args, **kwargs)

    placer.pick = pick_failing_second
    sent = ([50, 51, 52], [80, 81, 82])      # together: both go to slots, each placed by pick

    def send(prompt):
        return lambda: httpx.post(server.url + "/v1/completions",
                                  json={"prompt": prompt, "max_tokens": 2, "temperature": 0}, timeout=60)

    results = dict(zip(map(tuple, sent), run_together(server, [send(p) for p in sent]), strict=True))
    assert len(prompts) == 2, prompts                    # not placed again after its failure
    failing = results.pop(tuple(prompts[1]))
    assert failing.status_code == 500 and "pick failed (injected)" in failing.text, failing.text
    (other,) = results.values()
    assert other.status_code == 200, other.text          # the request placed before it is not failed with it
    assert complete(server.url, [90, 91, 92])["usage"]["completion_tokens"] == 2
