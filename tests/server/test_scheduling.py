"""The scheduler through HTTP on a live server: solo path vs slots vs batched give the same greedy tokens,
a long prompt is read in chunks between the other streams' decode steps, a client that leaves cancels
its request, a full queue answers 503 with Retry-After, and the views (/v1/slots, /metrics, monitor)."""

from __future__ import annotations

import json
import random
import threading
import time

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer


@pytest.fixture(scope="module")
def slow_model(tiny_model_factory):
    """A bigger random model (6 layers, 256 wide, Q8_0): about 1.5 ms a token on one thread, so that
    streams are still running while the test does something else."""
    return tiny_model_factory(ctx_len=4096, seed=5, n_layer=6, n_embd=256, n_ff=768, n_head=4, n_head_kv=2,
                              dtype="Q8_0")


@pytest.fixture(scope="module")
def server(slow_model):
    with LiveServer(model=str(slow_model), ctx=4096, batch=4, slot_ctx=2048, threads=1, queue=8,
                    conversation_cache_mib=0) as s:
        yield s


def ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 500) for _ in range(n)]


def complete(url: str, prompt: list[int], max_tokens: int, **kw) -> dict:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **kw},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def monitor(url: str) -> dict:
    return httpx.get(url + "/v1/monitor", timeout=30).json()


def wait_for(pred, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError("condition not met")


class Stream(threading.Thread):
    """A streaming /v1/completions request read in the background; `times` are token arrival times."""

    def __init__(self, url: str, prompt: list[int], max_tokens: int, stop_after: int | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.prompt, self.max_tokens, self.stop_after = url, prompt, max_tokens, stop_after
        self.times: list[float] = []
        self.text = ""
        self.status = None
        self.leave = threading.Event()     # set: the client goes away at its next token

    def run(self) -> None:
        body = {"prompt": self.prompt, "max_tokens": self.max_tokens, "temperature": 0, "stream": True,
                "ignore_eos": True}
        with httpx.stream("POST", self.url + "/v1/completions", json=body, timeout=120) as r:
            self.status = r.status_code
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                piece = chunk["choices"][0]["text"]
                if piece:
                    self.times.append(time.monotonic())
                    self.text += piece
                if self.leave.is_set() or (self.stop_after is not None and len(self.times) >= self.stop_after):
                    return       # leaving the with-block closes the connection mid-stream


def request_record(url: str, n_prompt: int) -> dict:
    return [r for r in monitor(url)["requests"] if r["prompt_tokens"] == n_prompt][-1]


def test_greedy_tokens_are_the_same_solo_in_a_slot_and_batched(server):
    prompt = ids(60, 1)
    solo = complete(server.url, prompt, 24)
    assert request_record(server.url, 60)["context"] == "main"
    # in a slot, decoded in one batch with a long stream on main
    background = Stream(server.url, ids(30, 2), 4000)
    background.start()
    wait_for(lambda: monitor(server.url)["totals"]["in_flight"] == 1)
    in_slot = complete(server.url, prompt, 24)
    assert request_record(server.url, 60)["context"] != "main"
    assert in_slot["choices"][0]["text"] == solo["choices"][0]["text"]
    # three at once, batched with each other and the background stream
    results: list[dict] = []
    threads = [threading.Thread(target=lambda: results.append(complete(server.url, prompt, 24))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["choices"][0]["text"] for r in results] == [solo["choices"][0]["text"]] * 3
    assert background.is_alive(), "the background stream ended early; the batched case was not exercised"
    background.leave.set()
    background.join()
    assert background.status == 200


def test_four_streams_progress_while_a_long_prompt_is_read(server):
    streams = [Stream(server.url, ids(20, 10 + i), 1200) for i in range(4)]
    for s in streams:
        s.start()
        time.sleep(0.05)
    wait_for(lambda: monitor(server.url)["totals"]["in_flight"] == 4 and all(s.times for s in streams))
    long_prompt = ids(1900, 99)
    t0 = time.monotonic()
    long = complete(server.url, long_prompt, 2)
    t1 = time.monotonic()
    rec = request_record(server.url, 1900)
    assert rec["prefill_chunks"] >= 4
    assert rec["decode_steps_during_prefill"] >= rec["prefill_chunks"] - 1   # a decode step between chunks
    for s in streams:
        during = [t for t in s.times if t0 <= t <= t1]
        assert len(during) >= 3, "a stream stalled while the long prompt was read"
    assert long["usage"]["prompt_tokens"] == 1900
    for s in streams:
        s.join()
        assert s.status == 200


def test_a_client_that_leaves_cancels_its_request(server):
    s = Stream(server.url, ids(25, 7), 3000, stop_after=3)
    s.start()
    s.join()
    rec = wait_for(lambda: next((r for r in monitor(server.url)["requests"]
                                 if r["prompt_tokens"] == 25 and r["status"] == "cancelled"), None), timeout=20)
    assert rec["output_tokens"] < 3000
    assert monitor(server.url)["totals"]["in_flight"] == 0


def test_a_full_queue_answers_503_with_retry_after(slow_model):
    with LiveServer(model=str(slow_model), ctx=4096, batch=0, threads=1, queue=0, conversation_cache_mib=0) as s:
        running = Stream(s.url, ids(10, 3), 3000)
        running.start()
        wait_for(lambda: monitor(s.url)["totals"]["in_flight"] == 1)
        r = httpx.post(s.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=30)
        assert r.status_code == 503 and r.headers["Retry-After"]
        assert "the queue is full (0 requests waiting, the server's --queue 0); retry later" == r.json()["error"]["message"]
        r = httpx.post(s.url + "/v1/messages", json={"max_tokens": 2, "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 503 and r.json()["error"]["type"] == "overloaded_error"
        assert running.is_alive(), "the running request ended before the checks; they proved nothing"
        running.leave.set()
        running.join()
        wait_for(lambda: monitor(s.url)["totals"]["in_flight"] == 0)
        assert complete(s.url, ids(5, 4), 2)["usage"]["completion_tokens"] == 2
        assert 'strata_requests_rejected_total{reason="queue_full"} 2' in httpx.get(s.url + "/metrics").text


def test_slots_metrics_and_monitor_views(server):
    complete(server.url, ids(40, 21), 4)
    slots = httpx.get(server.url + "/v1/slots").json()
    assert [s["id"] for s in slots["slots"]] == ["main", 1, 2, 3, 4]
    assert all({"state", "tokens", "capacity"} <= set(s) for s in slots["slots"])
    assert slots["decisions"] and all("reason" in d and "reused" in d for d in slots["decisions"])
    text = httpx.get(server.url + "/metrics").text
    for name in ("strata_requests_total", "strata_prompt_tokens_read_total", "strata_prompt_tokens_reused_total",
                 "strata_generated_tokens_total", "strata_prefill_seconds_total", "strata_decode_seconds_total",
                 "strata_queue_depth", "strata_slots_busy", "strata_slot_decode_tokens_per_second"):
        assert f"# TYPE {name} " in text, name
    snap = monitor(server.url)
    for key in ("time", "version", "endpoint", "info_line", "model", "engine", "slots", "requests", "decisions",
                "totals", "log_tail"):
        assert key in snap, key
    assert "contexts main 4096 + 4 slots x 2048 in 1 group, KV" in snap["info_line"], snap["info_line"]
    last = snap["requests"][-1]
    assert {"id", "api", "prompt_tokens", "reused_tokens", "source", "ttft_ms", "output_tokens", "status"} <= set(last)
    with httpx.stream("GET", server.url + "/v1/monitor/events?interval=0.25", timeout=30) as r:
        lines = []
        for line in r.iter_lines():
            lines.append(line)
            if sum(1 for x in lines if x.startswith("data: ")) == 2:
                break
    assert lines[0] == "event: snapshot" and json.loads(lines[1][6:])["version"]
    for bad in ("abc", "0", "-1", "nan"):
        r = httpx.get(server.url + f"/v1/monitor/events?interval={bad}", timeout=30)
        assert r.status_code == 400 and "'interval' must be a number of seconds above 0" in r.text, (bad, r.text)


def test_mismatch_position_is_recorded(server):
    base = ids(300, 31)
    complete(server.url, base, 2)
    changed = base[:200] + ids(100, 32)
    complete(server.url, changed, 2)
    rec = request_record(server.url, 300)
    assert rec["reused_tokens"] == 200 and rec["mismatch_at"] == 200
    assert isinstance(rec["mismatch_excerpt"], str)


def test_solo_only_server_queues_and_serves_everyone_in_turn(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=1024, batch=0, threads=1, queue=8, conversation_cache_mib=0) as s:
        results: list[dict] = []
        threads = [threading.Thread(target=lambda i=i: results.append(complete(s.url, ids(40, 60 + i), 20)))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 4 and all(r["usage"]["completion_tokens"] >= 1 for r in results)
        assert {r["context"] for r in monitor(s.url)["requests"]} == {"main"}
        assert monitor(s.url)["totals"]["queue_depth"] == 0


def test_a_prompt_whose_start_another_request_is_reading_waits_and_copies_it(server):
    """Claude Code's sessions in one folder (and its parallel subagents) begin with the same system prompt
    and tools. Two such prompts sent together were each read whole, side by side; the second now waits
    while the first reads the shared start, then copies it and reads only its own end."""
    from tests.server.live import run_together

    shared = ids(1500, 50)
    first, second = shared + ids(20, 51), shared + ids(30, 52)
    run_together(server, [lambda: complete(server.url, first, 2), lambda: complete(server.url, second, 2)])
    assert request_record(server.url, 1520)["reused_tokens"] == 0
    assert request_record(server.url, 1530)["reused_tokens"] >= 1500 - 512
