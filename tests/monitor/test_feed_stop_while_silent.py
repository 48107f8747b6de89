"""The feed client's stop ends at once while its server says nothing. The app stops it on the GUI thread (Quit,
SIGTERM, Restart: controller._stop_following), and stop() closed the response under the reader blocked in its
read: the close waits for that read (the buffered reader's lock), so until the server's next bytes or the 10 s read
timeout. Meanwhile the app answered nothing and drew nothing: under load, a SIGTERM's next snapshot came late and a
second launch's knock, unanswered in 1 s, was told "brought forward" by an app that was quitting
(tests/app/test_signal_quit.py, once in a loaded run). Real `strata serve` in a subprocess, behind a real TCP relay
that holds the server's bytes back; real feed client."""

from __future__ import annotations

import socket
import threading
import time

from strata.monitor.client import READ_TIMEOUT_S, FeedClient
from strata.monitor.model import MonitorModel

from tests.monitor.test_slow_link_is_answering import SlowRelay
from tests.server.body_fuzz import start_serve, stop_serve

STOP_BOUND_S = 2.0     # well under the read timeout the stop waited for, well over a loaded machine's thread switch


class HeldRelay(SlowRelay):
    """SlowRelay at full speed whose server-to-client bytes are held once `held` is set (a server gone silent)."""

    def __init__(self, upstream_port: int) -> None:
        self.held = threading.Event()
        super().__init__(upstream_port, rate=1 << 30)

    def _pump(self, src: socket.socket, dst: socket.socket, size: int, pause: float) -> None:
        if pause:                    # the server's side: forwarded until held, then kept back
            while not self.held.is_set():
                src.settimeout(0.05)
                try:
                    data = src.recv(size)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                dst.sendall(data)
            self.stopped.wait()
            return
        super()._pump(src, dst, size, pause)


def test_stop_ends_at_once_while_the_server_says_nothing(tiny_model_factory, tmp_path):
    served = start_serve(str(tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)), tmp_path)
    relay = HeldRelay(int(served.url.rsplit(":", 1)[1]))
    client = FeedClient(f"http://127.0.0.1:{relay.port}", MonitorModel()).start()
    try:
        deadline = time.monotonic() + 30
        while client.snapshots < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.snapshots >= 1, "no snapshot came through the relay"
        relay.held.set()
        time.sleep(0.5)              # the relay's last bytes read: the reader now waits on a silent feed
        t0 = time.monotonic()
        client.stop()
        took = time.monotonic() - t0
        # stop() joins the reader (up to 5 s): back this soon, the reader has ended
        assert took < STOP_BOUND_S, f"stop took {took:.1f} s (read timeout {READ_TIMEOUT_S:g} s)"
    finally:
        client.stop()
        relay.close()
        stop_serve(served)


def test_stop_ends_at_once_while_the_answer_has_not_begun(tmp_path):
    """A server that took the connection and sent nothing yet (busy: the feed's `not answering`): the reader waits
    in urlopen for the headers, before any response exists, and stop() had nothing to wake: it returned after its
    5 s join with the reader still waiting out the read timeout. A real listening socket that never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    asked = threading.Event()
    held: list[socket.socket] = []

    def take() -> None:
        conn, _ = listener.accept()
        held.append(conn)
        if conn.recv(4096):          # the request came: the client now waits for the answer's headers
            asked.set()
    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    client = FeedClient(f"http://127.0.0.1:{listener.getsockname()[1]}", MonitorModel()).start()
    try:
        assert asked.wait(30), "the feed's request never came"
        time.sleep(0.2)              # the reader is in its wait for the headers
        t0 = time.monotonic()
        client.stop()
        took = time.monotonic() - t0
        assert took < STOP_BOUND_S, f"stop took {took:.1f} s (read timeout {READ_TIMEOUT_S:g} s)"
        assert not client._thread.is_alive(), "the reader still waits for the answer"
    finally:
        client.stop()
        for conn in held:
            conn.close()
        listener.close()
