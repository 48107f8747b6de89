"""A client that stopped reading its stream (a suspended agent, a hung pipe) does not hold the server's stop:
aiohttp waits for running handlers before it closes, and a handler blocked writing to a full socket waited out
aiohttp's default of 60 s. The stop waits stop_progress.HANDLER_WAIT_S for them, then closes them. Real
`strata serve` process, a raw socket with a small receive buffer that never reads."""

from __future__ import annotations

import json
import logging
import signal
import socket
import threading
import time

import httpx2 as httpx
from strata.server import stop_progress
from strata.server.stop_progress import HANDLER_WAIT_S

from tests.server.live import LiveServer
from tests.server.sched_stress import Pause, wait_for
from tests.server.test_auth_and_lifecycle import listening_port, posix_only, start_cli, wait_healthy


def stalled_stream(port: int) -> socket.socket:
    """A streamed answer asked for and never read: 6,000 tokens with 20 alternatives each, ~10 MB of events, more
    than the kernel's socket buffers hold (up to 4 MiB for the server's side), so the handler blocks writing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)    # set before connect: the window stays small
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "go on"}], "stream": True,
                       "max_tokens": 6000, "ignore_eos": True, "temperature": 0, "logprobs": True,
                       "top_logprobs": 20}).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


@posix_only
def test_a_client_not_reading_its_stream_does_not_hold_the_stop(tiny_model, tmp_path):
    proc, log = start_cli(["--model", str(tiny_model), "--ctx", "6400", "--threads", "1", "--batch", "0",
                           "--conversation-cache-mib", "0", "--lookup-draft", "0"], tmp_path)
    sock = None
    try:
        port = listening_port(log, proc)
        wait_healthy(port, proc)
        sock = stalled_stream(port)
        deadline = time.monotonic() + 60
        while True:          # the answer made in full: what is left is its writing, blocked by the client
            done = httpx.get(f"http://127.0.0.1:{port}/v1/monitor", timeout=10).json()["totals"]["requests"]
            if done >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert done >= 1, log.read_text()[-2000:]
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(120)
        took = time.monotonic() - t0
    finally:
        if sock is not None:
            sock.close()
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text, text
    assert took < HANDLER_WAIT_S + 15, (took, text[-2000:])     # 60 s and more before
    assert "not read" in text and "closed" in text, text[-2000:]


def test_the_wait_for_a_stalled_reader_is_handler_wait_s_in_all(tiny_model, caplog):
    """aiohttp waits its shutdown_timeout twice for a handler blocked writing (for the handler, then after
    cancelling its body's read): given HANDLER_WAIT_S itself, the stop held 10.0 s, not the 5 s docs and warning say."""
    caplog.set_level(logging.WARNING, logger="strata.server")
    server = LiveServer(model=str(tiny_model), ctx=6400, batch=0, threads=1, conversation_cache_mib=0,
                        lookup_draft=0).start()
    sock = stalled_stream(server.port)
    try:
        wait_for(lambda: httpx.get(f"{server.url}/v1/monitor", timeout=10).json()["totals"]["requests"] >= 1,
                 what="the answer made in full")
    finally:
        t0 = time.monotonic()
        server.stop()
        took = time.monotonic() - t0
        sock.close()
    assert took < HANDLER_WAIT_S * 1.5, took
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopping: the answer")]
    assert len(lines) == 1 and "was not read by its client" in lines[0] and "bytes unsent" in lines[0], lines


def test_an_answer_the_engine_never_ended_is_not_blamed_on_its_client(tiny_model, caplog, monkeypatch):
    """A stop that gives the engine step under way up as stuck leaves its requests unanswered; aiohttp then
    cancels their handlers. Their clients were reading: the warning said they were not."""
    monkeypatch.setattr(stop_progress, "STEP_WAIT_SLACK_S", 0.5)    # a decode step is stuck after 0.5 s
    caplog.set_level(logging.WARNING, logger="strata.server")
    out: dict = {}

    def post() -> None:
        try:
            out["response"] = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 50},
                                         timeout=60)
        except httpx.HTTPError as e:
            out["error"] = e

    server = LiveServer(model=str(tiny_model), ctx=1024, batch=0, threads=1, conversation_cache_mib=0,
                        lookup_draft=0).start()
    with Pause(server.state.engine, "decode") as stuck:
        client = threading.Thread(target=post)
        client.start()
        try:
            assert stuck.entered.wait(30)
        finally:
            server.stop()
    client.join(30)
    assert "error" in out, out           # its connection closed without an answer
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopping: the answer")]
    assert lines == [f"stopping: the answer to POST /v1/completions had not ended {HANDLER_WAIT_S:g} s after the "
                     "engine stopped; its connection is closed"], lines
