"""A client that stopped reading its stream (a suspended agent, a hung pipe) does not hold the server's stop:
aiohttp waits for running handlers before it closes, and a handler blocked writing to a full socket waited out
aiohttp's default of 60 s. The stop waits stop_progress.HANDLER_WAIT_S for them, then closes them. Real
`strata serve` process, a raw socket with a small receive buffer that never reads."""

from __future__ import annotations

import json
import signal
import socket
import time

import httpx2 as httpx
from strata.server.stop_progress import HANDLER_WAIT_S

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
