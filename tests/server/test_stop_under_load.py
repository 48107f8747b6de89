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
    # what the contexts held (the running requests' prompts, read or partly read): main's and the slot's, or
    # the slot's alone where the requests came together and none ran on main
    assert len(kept) >= 1 and "stopped; kept for the next start: " in log, log[-3000:]
    said = re.search(r"stopped; kept for the next start: .* cold .*\((\d+) entr", log)
    assert said and int(said.group(1)) == len(kept), log[-3000:]
