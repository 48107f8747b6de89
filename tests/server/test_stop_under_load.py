"""`strata serve` stopped (SIGTERM, or the end of standard input under --stop-on-stdin-eof) with requests
running and queued, on every API: each client gets an end (an error event, a failed response, a 503 with
Retry-After; never a hang), the conversations held are kept on the cold level, the exit status is 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import httpx2 as httpx
import pytest

from tests.server.sched_stress import KINDS, WAIT_S, Client, body_for, wait_for
from tests.server.test_auth_and_lifecycle import listening_port, wait_healthy
from tests.server.test_scheduler_stress import stress_model  # noqa: F401  (a fixture)


@pytest.fixture(scope="module")
def slow_model(tiny_model_factory):
    """6 layers, 256 wide (Q8_0): 1,500 tokens take seconds, so requests are still running and queued."""
    return tiny_model_factory(ctx_len=4096, seed=5, n_layer=6, n_embd=256, n_ff=768, n_head=4, n_head_kv=2,
                              dtype="Q8_0")


def start_server(model, tmp_path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("STRATA_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", "--threads", "1",
         "--model", str(model), "--ctx", "4096", "--batch", "1", "--slot-ctx", "2048", "--queue", "16",
         "--stop-on-stdin-eof", "--conversation-cache-mib", "8",
         "--conversation-cache-cold-dir", str(tmp_path / "cold"), "--conversation-cache-cold-mib", "64"],
        stdin=subprocess.PIPE, stdout=open(tmp_path / "server.log", "w"), stderr=subprocess.STDOUT, env=env,
        cwd=tmp_path)


@pytest.mark.parametrize("how", ["sigterm", "stdin_eof"])
def test_a_stop_with_requests_running_and_queued_ends_every_client(slow_model, tmp_path, how):
    proc = start_server(slow_model, tmp_path)
    clients = []
    try:
        port = listening_port(tmp_path / "server.log", proc)
        wait_healthy(port, proc)
        url = f"http://127.0.0.1:{port}"
        for i, kind in enumerate(KINDS):
            messages = [{"role": "system", "content": f"Agent {i}. " + "Keep the rules. " * 30},
                        {"role": "user", "content": "go on " * 5}]
            path, body = body_for(kind, messages, 1500)
            body["ignore_eos"] = True
            clients.append(Client(url + ("" if kind == "responses_ws" else path), kind, body))

        def totals() -> dict:
            return httpx.get(url + "/v1/monitor", timeout=WAIT_S).json()["totals"]
        wait_for(lambda: (lambda t: t["in_flight"] >= 1 and t["queue_depth"] >= 2)(totals()),
                 what="requests running and queued")
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            proc.stdin.close()
        outcomes = [c.result() for c in clients]
        proc.wait(WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "server.log").read_text()
    for out in outcomes:
        assert not out.problems, (out, log[-3000:])
        # streamed: an error event (or a failed response); whole: a 503 with Retry-After (sched_stress checks it)
        assert out.end in ("stopped", "503"), (out, log[-3000:])
    assert proc.returncode == 0, log[-3000:]
    assert "Traceback" not in log, log
    kept = list((tmp_path / "cold").glob("*.img"))
    # what the contexts held before the step under way (the running requests' prompts as far as read; the piece
    # the stop interrupted is not read, Engine.interrupt): none when the one running was in its first piece
    assert "stopped; kept for the next start: " in log, log[-3000:]
    said = re.search(r"stopped; kept for the next start: .* cold .*\((\d+) entr", log)
    assert said and int(said.group(1)) == len(kept), log[-3000:]


def test_a_session_save_waiting_for_the_worker_when_the_server_stops_is_a_503(stress_model, tmp_path):  # noqa: F811
    """The session endpoints run on the worker thread (Scheduler.call): one still waiting for it when the
    server stops is told so (503, Retry-After), as a queued request is; it was a 500 'internal error:
    CancelledError' with a traceback in the log. One that comes once the stop began is the same 503."""
    import threading

    from tests.server.live import LiveServer

    server = LiveServer(model=str(stress_model), ctx=2048, batch=1, slot_ctx=1024, threads=1,
                        conversation_cache_mib=8, conversation_cache_cold_dir=str(tmp_path / "cold"),
                          conversation_cache_cold_mib=64).start()
    sched = server.state.scheduler
    entered, release = threading.Event(), threading.Event()
    sched.call(lambda: (entered.set(), release.wait(WAIT_S)))       # the worker busy (a long step)
    assert entered.wait(WAIT_S)
    answers: list = []
    saving = threading.Thread(target=lambda: answers.append(
        httpx.post(server.url + "/v1/sessions/work/save", json={"slot": 1}, timeout=WAIT_S)))
    saving.start()
    wait_for(lambda: len(sched._calls) == 1, what="the save waiting for the worker")
    stopping = threading.Thread(target=sched.stop)
    stopping.start()
    wait_for(lambda: sched._stopping, what="the stop begun")
    late = httpx.post(server.url + "/v1/sessions/work/save", json={"slot": 1}, timeout=WAIT_S)
    release.set()
    saving.join(WAIT_S)
    stopping.join(WAIT_S)
    server.stop()
    for r in answers + [late]:
        assert r.status_code == 503 and r.headers.get("Retry-After"), (r.status_code, r.text)
        assert "stopping" in r.json()["error"]["message"]


RESTORED_BODY = {"messages": [{"role": "system", "content": "Keep the rules. " * 120}, {"role": "user", "content": "go"}],
                 "max_tokens": 4, "temperature": 0}


def serve_cold(model, tmp_path):
    from tests.server.live import LiveServer

    return LiveServer(model=str(model), ctx=4096, batch=0, threads=1, conversation_cache_mib=8,
                      conversation_cache_cold_dir=str(tmp_path / "cold"), conversation_cache_cold_mib=64).start()


def one_conversation_on_the_cold_level(model, tmp_path) -> tuple[list[str], int]:
    """A server answers RESTORED_BODY and stops, its conversation going to the cold level: the level's file
    names, and the prompt's tokens."""
    first = serve_cold(model, tmp_path)
    n_prompt = httpx.post(first.url + "/v1/chat/completions", json=RESTORED_BODY,
                          timeout=WAIT_S).json()["usage"]["prompt_tokens"]
    first.stop()
    return sorted(p.name for p in (tmp_path / "cold").iterdir()), n_prompt


def stop_during_a_held_restore(server, hold_at: int, on_feed=lambda real: None):
    """RESTORED_BODY sent again, the real restorer's `hold_at`-th piece held until the server's stop has
    begun (`on_feed(real restorer)` after each piece): the client's outcome once the stop is done."""
    import threading

    engine, real_restorer = server.state.engine, server.state.engine.restorer
    entered, release = threading.Event(), threading.Event()

    class HeldRestorer:
        def __init__(self, ctx: int) -> None:
            self.real, self.fed = real_restorer(ctx), 0

        def feed(self, data) -> None:
            self.fed += 1
            if self.fed == hold_at:
                entered.set()
                release.wait(WAIT_S)
            self.real.feed(data)
            on_feed(self.real)

        def __getattr__(self, name: str):
            return getattr(self.real, name)

    engine.restorer = HeldRestorer
    client = Client(server.url + "/v1/chat/completions", "chat", RESTORED_BODY)
    assert entered.wait(WAIT_S)
    stopping = threading.Thread(target=server.stop)
    stopping.start()
    wait_for(lambda: server.state.scheduler._stopping, what="the stop begun")
    release.set()
    stopping.join(WAIT_S)
    return client.result()


def test_a_restore_from_disk_under_way_when_the_server_stops_ends_at_its_next_piece(stress_model, tmp_path):  # noqa: F811
    """A history restored from the cold level is read piece by piece (whole chunks, up to 16 MiB): at a stop
    the restore ends after the piece being read, the entry kept on disk for the next start. It read on to the
    end while the stop waited, saying nothing (a 128K-token history of a 30B model: ~12 GiB, ~37 s; the app
    ends a stop quiet for 15 s, and the RAM entries not yet written are then lost)."""
    kept, n_prompt = one_conversation_on_the_cold_level(stress_model, tmp_path)
    images = [k for k in kept if k.endswith(".img")]
    assert len(images) == 1 and n_prompt > 3 * 256
    kept_bytes = (tmp_path / "cold" / images[0]).stat().st_size
    fed: list[int] = []
    out = stop_during_a_held_restore(serve_cold(stress_model, tmp_path), 1, lambda real: fed.append(1))
    assert out.end == "503", out                   # the request is told the server stopped
    assert len(fed) == 1, f"{len(fed)} pieces read after the stop began"
    # the entry is still there, whole
    assert set(images) <= {p.name for p in (tmp_path / "cold").glob("*.img")}
    assert (tmp_path / "cold" / images[0]).stat().st_size == kept_bytes


def test_a_stop_that_ends_a_restore_reads_no_prompt_piece_after_it(stress_model, tmp_path):  # noqa: F811
    """The step that began the restore went on once the stop had ended it: the request, its restore ended
    with nothing applied, read its prompt from the start (a whole prompt piece: ~1 min on a big model on the
    CPU, what the stop had just spared), and the stop then kept that piece as a new history beside the entry
    it came from, still on disk whole (a second file in the cold level's budget). After the stop begins, the
    worker starts no engine step: no prompt piece is read, no file is written."""
    kept, _ = one_conversation_on_the_cold_level(stress_model, tmp_path)
    assert len([k for k in kept if k.endswith(".img")]) == 1
    server = serve_cold(stress_model, tmp_path)
    engine = server.state.engine
    real_prefill = engine.prefill
    read_after_stop: list[int] = []

    def prefill(ctx, tokens, *args, **kwargs):
        if server.state.scheduler._stopping:
            read_after_stop.append(len(tokens))
        return real_prefill(ctx, tokens, *args, **kwargs)

    engine.prefill = prefill
    assert stop_during_a_held_restore(server, 1).end == "503"
    assert read_after_stop == [], f"prompt pieces read after the stop began: {read_after_stop}"
    assert sorted(p.name for p in (tmp_path / "cold").iterdir()) == kept   # nothing new beside the entry


@pytest.mark.skipif(sys.platform == "win32", reason="O_NONBLOCK on a pipe is POSIX")
def test_stdin_left_non_blocking_is_waited_on_not_taken_for_its_end(stress_model, tmp_path):  # noqa: F811
    """O_NONBLOCK belongs to the open pipe or terminal, shared with whoever else holds it (a parent or a shell
    that set it): os.read then raised BlockingIOError at once, which the watcher took for the end of input,
    and --stop-on-stdin-eof stopped the server as it started. It waits for input or the end instead."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("STRATA_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", "--threads", "1",
         "--model", str(stress_model), "--ctx", "512", "--stop-on-stdin-eof"],
        stdin=read_end, stdout=open(tmp_path / "server.log", "w"), stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    os.close(read_end)
    try:
        port = listening_port(tmp_path / "server.log", proc)
        wait_healthy(port, proc)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=WAIT_S,
                       json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 200 and proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
        os.close(write_end)                      # the end of input: the clean stop
        write_end = -1
        proc.wait(WAIT_S)
    finally:
        if write_end >= 0:
            os.close(write_end)
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "server.log").read_text()
    assert proc.returncode == 0 and log.count("standard input closed: stopping") == 1, log[-2000:]


def test_a_restore_the_stop_ends_midway_keeps_no_second_copy_of_its_part(stress_model, tmp_path,  # noqa: F811
                                                                         monkeypatch):
    """A restore ended by the stop after some whole chunks leaves them in the context: a prefix of the entry,
    which stays on disk whole. The stop kept that part as a history of its own (a second file in the level's
    budget, written while the stop runs: up to the gigabytes the stop had just not read). It keeps nothing
    for it. The pieces are cut to 64 KiB (one chunk each) so that a tiny model's entry has several."""
    from strata.server.cache import pipeline

    real_sizes = pipeline.aligned_sizes
    monkeypatch.setattr(pipeline, "aligned_sizes", lambda header, n: real_sizes(header, n, 64 << 10))
    kept, _ = one_conversation_on_the_cold_level(stress_model, tmp_path)
    restored: list[int] = []
    out = stop_during_a_held_restore(serve_cold(stress_model, tmp_path), 2,
                                     lambda real: restored.append(real.n_restored))
    assert out.end == "503"
    assert len(restored) == 2 and restored[-1] > 0, restored          # a part restored, then the stop
    assert sorted(p.name for p in (tmp_path / "cold").iterdir()) == kept
