"""`GET /v1/monitor/events` read by a slow client (a monitor on a busy machine or a slow link).

The feed wrote a snapshot every tick whatever the client had taken: the socket's send buffer (up to 4 MiB on
Linux) filled with snapshots the client had not read, so it read ever older ones. A 40-minute soak
(benchmarks/RESULTS.md, "Agent soak") measured a reader taking 8 KiB/s seeing snapshots 22 s old after
30 s, 186 s after 3.5 min, growing by ~0.9 s a second. Now a tick whose last snapshot the client has not yet
taken off the socket writes nothing, so what the client reads is at most about one snapshot and its own receive
buffer behind."""

from __future__ import annotations

import json
import socket
import sys
import time

import httpx2 as httpx
import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the kernel's send queue is read on Linux and macOS")


def read_slowly(port: int, seconds: float, chunk: int, every: float) -> list[float]:
    """Reads the feed `chunk` bytes every `every` seconds; the age of each snapshot when it was read (by its `mono`:
    one clock with this process's, no wall-clock step counted as age)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /v1/monitor/events?interval=0.25 HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.settimeout(10)
    buf, ages = b"", []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            buf += sock.recv(chunk)
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if line.startswith(b"data: "):
                        ages.append(time.monotonic() - json.loads(line[6:])["mono"])
            time.sleep(every)
    finally:
        sock.close()
    return ages


def test_a_slow_reader_gets_recent_snapshots_not_a_backlog(tiny_server):
    one = len(json.dumps(json.loads(httpx.get(tiny_server.url + "/v1/monitor", timeout=30).text)))
    # read about a third of what 4 snapshots a second are: a backlog would grow by ~2/3 s every second
    rate = max(1024, int(one * 4 / 3))
    ages = read_slowly(tiny_server.port, 16.0, rate // 4, 0.25)
    assert len(ages) >= 8, ages
    # a snapshot and the client's receive buffer (4 KiB asked, 8 KiB given), read at `rate`, plus a tick:
    # measured 1.7-3.0 s; 9-11 s at the end and growing before. Half as much again as margin for a loaded machine
    # (CI: the reader's sleeps and the server's ticks run late), still well under the backlog's
    bound = 1.5 * (1.0 + (one + 8192) / rate)
    assert max(ages[-4:]) < bound, (one, rate, [round(a, 1) for a in ages])


def test_a_fast_reader_still_gets_four_snapshots_a_second(tiny_server):
    ages = read_slowly(tiny_server.port, 3.0, 1 << 20, 0.01)
    assert len(ages) >= 10 and max(ages) < 1.5, [round(a, 2) for a in ages]
