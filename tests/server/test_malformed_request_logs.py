"""What the server's log says about a request whose HTTP aiohttp's parser refuses (a bad request line or
header): the client gets its 400 (docs/api.md, "Malformed requests"), and the log one WARNING line naming
the fault. aiohttp logged each at ERROR with a traceback of its own parser, which reads as a crash of the
server in a user's terminal. A body in `Content-Encoding: br` or `deflate` is no longer the parser's (it
decodes no body): the server's 415, with nothing logged by aiohttp at ERROR either."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from tests.server.live import LiveServer

MALFORMED = [
    (b"GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n", "HTTP/9.9"),
    (b"GET /v1/models HTTP/1.1\r\nHost x\r\n\r\n", "header"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
     b"Content-Encoding: br\r\nContent-Length: 2\r\n\r\n{}", "brotli"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
     b"Content-Encoding: deflate\r\nContent-Length: 8\r\n\r\njunkjunk", "deflate"),
]


@pytest.fixture(scope="module")
def server(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=1024, batch=0, threads=1) as live:
        yield live


def send(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.sendall(raw)
        return c.recv(4096)


@pytest.mark.parametrize(("raw", "named"), MALFORMED, ids=["version", "header", "br", "deflate"])
def test_a_malformed_request_is_one_warning_line_not_an_error_traceback(server, caplog, raw, named):
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    answer = send(server.port, raw)
    refused_encoding = named in ("deflate", "brotli")    # the server's 415, before the body is read
    assert answer.split(b"\r\n")[0].split(b" ")[1] == (b"415" if refused_encoding else b"400"), answer[:200]
    if refused_encoding:                      # nothing for aiohttp to log; draining the body may still fail
        time.sleep(0.5)
    deadline = time.monotonic() + 60          # aiohttp logs a parser's fault once it has answered it
    while not refused_encoding and time.monotonic() < deadline \
            and not [r for r in caplog.records if r.name == "aiohttp.server"]:
        time.sleep(0.05)
    logged = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert not [r for r in logged if r.levelno >= logging.ERROR or r.exc_info], \
        [(r.levelname, r.getMessage()) for r in logged]
    if not refused_encoding:
        warnings = [r.getMessage() for r in logged if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and named in warnings[0] and "\n" not in warnings[0], warnings


def test_the_server_still_answers_after_them(server):
    for raw, _ in MALFORMED:
        send(server.port, raw)
    answer = send(server.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_a_body_that_does_not_inflate_is_named_without_aiohttps_status_prefix(server):
    """The 400's message said `the request body cannot be read: 400, message: Can not decode ...`."""
    import json

    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Encoding: gzip\r\nContent-Length: 8\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as c:
        c.sendall(head)
        time.sleep(0.2)                       # the body after the headers, as a client's two writes arrive
        c.sendall(b"junkjunk")
        answer = c.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    message = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["message"]
    assert message == "the request body cannot be read: Can not decode content-encoding: gzip", message
