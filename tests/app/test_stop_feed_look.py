"""The stop's look at the server's monitor feed (43fe270: the app words its stop from `GET /v1/monitor`'s `stop`)
is the monitor's own one look (monitor/client.fetch_snapshot), not a second copy of it: 43fe270 built its own
request, and it already differed from the monitor's (no Accept header), as copies drift. Seen from the server's
side: the two requests arrive the same. The server is a stand-in (a real child process) that answers /health "ok"
and /v1/monitor with a `stop`, saying each request's headers on its output (server.log)."""

from __future__ import annotations

import sys
import time

from strata.app.supervisor import ServerSupervisor
from strata.monitor.client import FeedClient
from strata.monitor.model import MonitorModel

from tests.app.stand_in_server import stand_in_server

SERVER = stand_in_server(r"""
    if self.path == "/v1/monitor":
        said = {k: self.headers.get(k) for k in ("Accept", "Authorization")}
        print("asked: " + json.dumps(said, sort_keys=True), flush=True)
        body = json.dumps({"ready": True, "stop": {"keeps_on_disk": True, "conversations": 2}}).encode()
    else:
        body = b'{"status": "ok"}'
    status = 200
""")

WRITES_TWO = "stopping: stopping the server (it writes up to 2 conversations to disk first, for the next start)"


def test_the_stops_look_asks_the_feed_as_the_monitor_does(tmp_path):
    sup = ServerSupervisor(None, tmp_path / "logs", command=[sys.executable, "-c", SERVER], api_key="the-key")
    sup.start()
    try:
        deadline = time.monotonic() + 60
        while sup.status().state != "running":
            assert time.monotonic() < deadline, list(sup.events)
            time.sleep(0.02)
        monitors = FeedClient(sup.status().endpoint, MonitorModel(), api_key="the-key").fetch_once()
        assert monitors["stop"] == {"keeps_on_disk": True, "conversations": 2}
    finally:
        sup.stop()
    events = [text for _, text in sup.events]
    assert WRITES_TWO in events, events
    asked = [line for line in (tmp_path / "logs" / "server.log").read_text().splitlines() if line.startswith("asked: ")]
    assert len(asked) == 2 and asked[0] == asked[1], asked
    assert '"Authorization": "Bearer the-key"' in asked[1], asked
