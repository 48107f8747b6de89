"""The monitor feed's `stop` (what a clean stop now would do: app/stop_wording.py words the app's stop from it) is
in `GET /v1/monitor` alone, which the app asks once as its stop begins, not in each snapshot of
`/v1/monitor/events`: the stream sends 4 a second to each monitor window (the app's own, `strata monitor`), which
never shows it, and its count compares every context's history with every other's on the event loop
(slots.held_by_another: contexts that are prefixes of one another, an agent's branches, are sliced and compared
whole): 1.8 ms a snapshot with 8 contexts of 32k tokens, 4.8 ms with 16, 6.6 ms with 8 of 128k (measured on this
shared 2-core machine), 4 times a second per window, for a field no window reads."""

from __future__ import annotations

import json
import socket

import httpx2 as httpx


def first_event(port: int) -> dict:
    """The first snapshot of `/v1/monitor/events`, read off a plain socket."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /v1/monitor/events?interval=0.25 HTTP/1.1\r\nHost: x\r\n\r\n")
        buf = b""
        while True:
            chunk = sock.recv(65536)
            assert chunk, buf[-300:]
            buf += chunk
            for event in buf.split(b"\n\n")[:-1]:
                for line in event.split(b"\n"):
                    if line.startswith(b"data: "):
                        return json.loads(line[6:])


def test_the_stop_outlook_is_asked_for_not_streamed(tiny_server):
    asked = httpx.get(tiny_server.url + "/v1/monitor", timeout=30).json()
    assert set(asked["stop"]) == {"keeps_on_disk", "conversations"}, asked.get("stop")
    streamed = first_event(tiny_server.port)
    assert "totals" in streamed and "slots" in streamed       # a loaded server's snapshot, all else there
    assert "stop" not in streamed, streamed["stop"]
