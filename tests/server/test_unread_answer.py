"""A streamed answer whose client takes none of it off the socket (a hung or suspended agent, a laptop asleep
across a network) is ended after --answer-unread-s: its job cancelled, its connection closed, what was read
kept for the retry. Before, the engine wrote on for nobody to max_tokens (an agent's 32,000): session 40's
cancel trial saw 2,327 tokens decoded in 43 s for a client that read none, the send queue growing to 105 KB.
A client that reads slowly, but reads, gets its whole answer. Real `strata serve` in a subprocess (default
model), a raw socket that never reads (its receive buffer 4 KiB)."""

from __future__ import annotations

import json
import re
import socket
import time

import httpx2 as httpx
import openai
import pytest

from tests.server.test_auth_and_lifecycle import serving

UNREAD_S = 1.0
MESSAGES = [{"role": "user", "content": "Write a very long story, chapter after chapter."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_path):
    tmp = tmp_path_factory.mktemp("unread")
    with serving(["--model", str(default_model_path), "--ctx", "4096", "--batch", "1",
                  "--answer-unread-s", str(UNREAD_S)], tmp) as (port, log):
        yield port, log
    assert "Traceback" not in log.read_text(), log.read_text()


def metric(port: int, name: str) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))


def send_stream(port: int, max_tokens: int, rcvbuf: int = 4096) -> socket.socket:
    """A streamed chat request on a raw socket whose receive buffer is `rcvbuf` bytes; nothing read yet."""
    body = json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": max_tokens, "stream": True,
                       "temperature": 0, "ignore_eos": True}).encode()
    sk = socket.socket()
    sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)   # before connect: the window it offers
    sk.connect(("127.0.0.1", port))
    sk.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Connection: close\r\n"
               + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sk


def read_to_end(sk: socket.socket, pause_s: float = 0.0, timeout: float = 60.0) -> bytes:
    """What the socket holds until the server closes it (a reset counts as the end); `pause_s` between reads."""
    sk.settimeout(timeout)
    data = b""
    while True:
        try:
            b = sk.recv(2048)
        except ConnectionResetError:
            return data
        if not b:
            return data
        data += b
        time.sleep(pause_s)


def wait_idle(port: int, timeout: float) -> float:
    t0 = time.monotonic()
    while metric(port, "strata_requests_in_flight") > 0:
        assert time.monotonic() - t0 < timeout, "the unread answer is still being written"
        time.sleep(0.1)
    return time.monotonic() - t0


def test_an_answer_nobody_reads_is_ended_and_what_was_read_kept(server):
    port, log = server
    generated = metric(port, "strata_generated_tokens_total")
    sk = send_stream(port, max_tokens=3000)
    try:
        while metric(port, "strata_generated_tokens_total") == generated:   # it has begun
            time.sleep(0.05)
        wait_idle(port, timeout=15.0)        # 3,000 tokens take ~40 s here: not written to their end
        written = metric(port, "strata_generated_tokens_total") - generated
        assert written < 3000
        time.sleep(0.5)
        assert metric(port, "strata_generated_tokens_total") - generated == written   # nothing more for it
        assert b"data: [DONE]" not in read_to_end(sk)    # cut, not ended as a whole answer
    finally:
        sk.close()
    text = log.read_text()
    assert re.search(r"request \d+: its client took none of the answer for 1 s \(--answer-unread-s\)", text), text
    # the prompt it read stays in its context: the agent's retry reads none of it again
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60)
    r = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=2, temperature=0)
    assert r.usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens - 1


def test_a_slow_reader_that_reads_gets_its_whole_answer(server):
    port, _ = server
    sk = send_stream(port, max_tokens=150, rcvbuf=2048)
    try:
        data = read_to_end(sk, pause_s=0.3)           # ~7 KB a second: behind the engine, yet taking some
    finally:
        sk.close()
    assert data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")     # the last chunk, then the chunked body's end
    assert data.count(b'"finish_reason":"length"') == 1
    wait_idle(port, timeout=10.0)


def send_socket_request(port: int, max_tokens: int, rcvbuf: int) -> socket.socket:
    """A Responses WebSocket's response.create on a raw socket whose receive buffer is `rcvbuf` bytes; the
    handshake's answer read, nothing after it."""
    sk = socket.socket()
    sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sk.connect(("127.0.0.1", port))
    sk.sendall(b"GET /v1/responses HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += sk.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    frame = json.dumps({"type": "response.create", "model": "m", "input": MESSAGES[0]["content"],
                        "max_output_tokens": max_tokens, "temperature": 0}).encode()
    mask = b"\1\2\3\4"
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(frame))
    sk.sendall(b"\x81\xfe" + len(frame).to_bytes(2, "big") + mask + masked)   # a text frame, masked
    return sk


def test_a_socket_nobody_reads_is_ended_and_a_slow_reader_is_not(server):
    """The Responses WebSocket's frames bypass aiohttp's HTTP writer: they are counted as written (socket_queue
    .count_sent), so what its client took is known there too."""
    port, log = server
    sk = send_socket_request(port, max_tokens=3000, rcvbuf=4096)
    try:
        time.sleep(0.5)
        wait_idle(port, timeout=15.0)
    finally:
        sk.close()
    assert len(re.findall(r"its client took none of the answer", log.read_text())) >= 1
    ended = log.read_text().count("its client took none of the answer")
    sk = send_socket_request(port, max_tokens=150, rcvbuf=2048)
    try:
        data = b""
        sk.settimeout(60)
        while b'"response.incomplete"' not in data:     # its end at max_output_tokens
            b = sk.recv(2048)
            assert b, "the slow reader's socket was closed"
            data += b
            time.sleep(0.3)
    finally:
        sk.close()
    assert log.read_text().count("its client took none of the answer") == ended


def test_an_answer_not_streamed_is_never_ended_for_what_waits_before_it(server):
    """A client that pipelines (HTTP/1.1: it sends its requests first, then reads the answers in order) has
    the first answer waiting unread while the second, not streamed, is generated: nothing of that one is
    being sent, so the bound does not apply to it. Before, it was ended after the bound and its connection
    cut, the first answer lost with it."""
    port, _ = server

    def request(max_tokens: int, **more) -> bytes:
        body = json.dumps({"model": "m", "messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0,
                           "ignore_eos": True, **more}).encode()
        return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    sk = socket.socket()
    sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sk.connect(("127.0.0.1", port))
    last = request(8).replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n")
    sk.sendall(request(400, logprobs=True, top_logprobs=20) + request(600) + last)   # the first ~0.7 MB
    try:
        time.sleep(8 * UNREAD_S)      # it reads once all are sent and answered (the second takes ~4 s)
        data = read_to_end(sk)
    finally:
        sk.close()
    assert data.count(b"HTTP/1.1 200") == 3, data[-500:]
