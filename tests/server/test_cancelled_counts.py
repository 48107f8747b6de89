"""What /metrics counts for a request whose client left before its answer: it ended ("cancelled" in
strata_requests_total, as the monitor's request list says), and only the prompt tokens the engine read
count as read. Before: a request cancelled while queued was in the monitor's list but not in
requests_total, and one cancelled while its prompt was being read counted the whole prompt as read
(1,000 where the engine had read 192). On a live server (real engine, real scheduler thread); the
worker is held between two steps with `Scheduler.call`, so the cancel lands at a known step."""

from __future__ import annotations

import threading
import time

import pytest
from strata.engine.sampling import SamplingParams
from strata.server.jobs import Job

from tests.server.live import LiveServer

PROMPT = [(i * 7) % 400 + 50 for i in range(1000)]
CHUNK = 64


@pytest.fixture(scope="module")
def server(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=4096, batch=0, threads=1, prefill_chunk=CHUNK,
                    conversation_cache_mib=0) as s:
        yield s


def hold_worker_when(sched, ready) -> tuple[threading.Event, threading.Event]:
    """Holds the worker thread at the first turn of its loop where `ready()` is true (a call runs once a turn and
    asks for the next until then): returns (held, release)."""
    held, release = threading.Event(), threading.Event()

    def turn() -> None:
        if not ready():
            sched.call(turn)
            return
        held.set()
        release.wait(60)

    sched.call(turn)
    return held, release


def hold_worker(sched, after_steps: int) -> tuple[threading.Event, threading.Event]:
    """Holds the worker thread after `after_steps` more turns of its loop: returns (held, release)."""
    left = [after_steps + 1]

    def ready() -> bool:
        left[0] -= 1
        return left[0] <= 0

    return hold_worker_when(sched, ready)


def wait_for(pred, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.01)
    raise TimeoutError("condition not met")


def job(prompt: list[int]) -> Job:
    return Job(api="openai", prompt=list(prompt), max_tokens=5, sampling=SamplingParams())


def ended(sched, j: Job) -> bool:
    return any(r["id"] == j.id for r in list(sched.requests))


def test_a_request_cancelled_while_queued_is_counted_and_reads_nothing(server):
    sched, metrics = server.state.scheduler, server.state.metrics
    before = metrics.snapshot()
    held, release = hold_worker(sched, 0)
    assert held.wait(60)
    j = job(PROMPT)
    sched.submit(j)
    sched.cancel(j)            # its client left while it waited
    release.set()
    wait_for(lambda: ended(sched, j))
    after = metrics.snapshot()
    assert after["requests_total"].get("cancelled", 0) == before["requests_total"].get("cancelled", 0) + 1
    assert after["prompt_tokens_read"] == before["prompt_tokens_read"]


def test_a_request_cancelled_while_its_prompt_is_read_counts_what_was_read(server):
    sched, metrics = server.state.scheduler, server.state.metrics
    sched.call(lambda: None).result(60)
    before = metrics.snapshot()
    held, release = hold_worker(sched, 3)     # admitted and 3 chunks read, then held
    j = job([p + 1 for p in PROMPT])          # nothing of it in main
    sched.submit(j)
    assert held.wait(60)
    sched.cancel(j)
    release.set()
    wait_for(lambda: ended(sched, j))
    after = metrics.snapshot()
    read = len(sched.table.main.tokens)       # what main holds is what the engine read of it
    assert 0 < read < len(PROMPT) and read % CHUNK == 0
    assert after["prompt_tokens_read"] - before["prompt_tokens_read"] == read
    assert after["requests_total"].get("cancelled", 0) == before["requests_total"].get("cancelled", 0) + 1


def test_every_counted_request_has_its_ended_line_in_the_log(server, caplog):
    """The log's 'request N (api) ended (status)' lines are the requests /metrics counts: one cancelled
    while queued was counted (and listed in the monitor) with no line at all, so the log showed one
    request fewer than strata_requests_total."""
    import logging

    caplog.set_level(logging.INFO, logger="strata.server.scheduler")
    sched, metrics = server.state.scheduler, server.state.metrics
    sched.call(lambda: None).result(60)
    before = sum(metrics.snapshot()["requests_total"].values())
    held, release = hold_worker(sched, 0)
    assert held.wait(60)
    queued, ran = job(PROMPT), job(PROMPT[:100])
    sched.submit(ran)
    sched.submit(queued)
    sched.cancel(queued)
    release.set()
    wait_for(lambda: ended(sched, queued) and ended(sched, ran))
    counted = sum(metrics.snapshot()["requests_total"].values()) - before
    lines = [r.getMessage() for r in caplog.records if " ended (" in r.getMessage()]
    assert counted == 2 and len(lines) == 2, lines
    line = next(x for x in lines if x.startswith(f"request {queued.id} "))
    assert line.startswith(f"request {queued.id} (openai) ended (cancelled): ") and "prompt 1000 (reused 0" in line
    assert "output 0" in line, line


def test_requests_still_queued_at_a_stop_are_counted_and_logged(tiny_model, caplog):
    """A stop answers the requests still queued 'the server is stopping' (a running one is ended, counted and
    logged as cancelled): the queued ones were neither counted nor logged, and the queue depth stayed up,
    so the last /metrics, the monitor and the log lost them."""
    import logging

    caplog.set_level(logging.INFO, logger="strata.server.scheduler")
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        sched, metrics = s.state.scheduler, s.state.metrics
        held, release = hold_worker(sched, 0)
        assert held.wait(60)
        jobs = [job(PROMPT[:200]), job([p + 1 for p in PROMPT[:200]]), job([p + 2 for p in PROMPT[:200]])]
        for j in jobs:
            j.max_tokens = 500
            sched.submit(j)
        stopping = threading.Thread(target=sched.stop)
        stopping.start()
        wait_for(lambda: sched._stopping)
        release.set()        # the worker ends its turn and stops: the three are still queued
        stopping.join(60)
        counts = metrics.snapshot()["requests_total"]
        lines = [r.getMessage() for r in caplog.records if " ended (" in r.getMessage()]
        assert counts.get("cancelled", 0) == 3 and sched.queue_depth == 0, (counts, sched.queue_depth)
        assert sorted(x.split()[1] for x in lines) == sorted(str(j.id) for j in jobs), lines
        assert all("the server is stopping" in x for x in lines), lines


def test_a_request_cancelled_before_its_first_token_has_no_time_to_first_token(server, caplog):
    """A request whose client left while its prompt was read made no token: its 'ended' line said 'ttft 1234 ms'
    (the time to its cancel), a first-token time it never had. Now 'ttft -'; its entry in the monitor's requests
    has no ttft_ms nor decode rate."""
    import logging

    caplog.set_level(logging.INFO, logger="strata.server.scheduler")
    sched = server.state.scheduler
    sched.call(lambda: None).result(60)
    held, release = hold_worker(sched, 2)     # admitted and 2 chunks read, then held
    j = job([p + 3 for p in PROMPT])
    sched.submit(j)
    assert held.wait(60)
    sched.cancel(j)
    release.set()
    wait_for(lambda: ended(sched, j))
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith(f"request {j.id} "))
    assert " ended (cancelled): " in line and "output 0" in line, line
    assert line.endswith(", ttft -"), line
    rec = next(r for r in list(sched.requests) if r["id"] == j.id)
    assert rec["output_tokens"] == 0 and "ttft_ms" not in rec, rec
    assert "decode_tps" not in rec, rec
