"""A server whose snapshots come slowly over a slow link (a remote monitor on a poor connection: the soak's reader
took 8 KiB/s of 70 KB snapshots, one every ~9 s) is answering: its bytes flow. 69eecfb counted silence from the
last whole snapshot, so such a link read `not answering` for most of each snapshot, every one, its curves broken at
each and its generation rate never shown. Silence now counts from the last bytes the feed sent. Real `strata serve`
in a subprocess behind a real throttling TCP relay, real feed client."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx2 as httpx
from strata.monitor.client import FeedClient
from strata.monitor.model import MonitorModel
from strata.monitor.silence import SILENT_AFTER_S

from tests.server.body_fuzz import start_serve, stop_serve

SNAPSHOT_TAKES_S = 2 * SILENT_AFTER_S     # each snapshot crosses the link in twice the silence bound


class SlowRelay:
    """127.0.0.1:port -> upstream; what the server sends reaches the client at `rate` bytes a second, in tenths."""

    def __init__(self, upstream_port: int, rate: int) -> None:
        self.upstream_port, self.rate = upstream_port, rate
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            self.socks += [client, server]
            threading.Thread(target=self._pump, args=(client, server, 1 << 16, 0.0), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, max(1, self.rate // 10), 0.1),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, size: int, pause: float) -> None:
        try:
            while not self.stopped.is_set():
                data = src.recv(size)
                if not data:
                    break
                dst.sendall(data)
                time.sleep(pause)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.stopped.set()
        for s in (self.listener, *self.socks):
            s.close()


def test_a_snapshot_that_takes_long_over_a_slow_link_is_not_a_silence(tiny_model_factory, tmp_path):
    served = start_serve(str(tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)), tmp_path)
    one = len(json.dumps(httpx.get(served.url + "/v1/monitor", timeout=30).json(), separators=(",", ":")))
    relay = SlowRelay(int(served.url.rsplit(":", 1)[1]), int(one / SNAPSHOT_TAKES_S))
    model = MonitorModel()
    client = FeedClient(f"http://127.0.0.1:{relay.port}", model).start()
    try:
        deadline = time.monotonic() + 30
        while client.snapshots < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert model.view().connection == "connected", model.view()
        seen, until = set(), time.monotonic() + 3 * SNAPSHOT_TAKES_S
        while time.monotonic() < until:
            seen.add(model.view().connection)
            time.sleep(0.1)
        assert seen == {"connected"}, (one, seen)      # before: "not answering" in each snapshot's crossing
        assert client.snapshots >= 2, client.snapshots
    finally:
        client.stop()
        relay.close()
        stop_serve(served)


def test_a_body_read_in_pieces_gives_its_lines():
    from strata.monitor.client import body_lines, parse_sse

    body = b"event: snapshot\ndata: {\"a\": 1}\n\nevent: snapshot\r\ndata: {\"b\": 22}\r\n\r\nlast"
    for size in (1, 2, 3, 7, len(body)):
        pieces = [body[i:i + size] for i in range(0, len(body), size)]
        assert list(body_lines(iter(pieces))) == body.splitlines(keepends=True), size
        assert list(parse_sse(body_lines(iter(pieces)))) == [("snapshot", '{"a": 1}'), ("snapshot", '{"b": 22}')]
