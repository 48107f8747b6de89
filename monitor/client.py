"""The monitor feed client: reads `GET /v1/monitor/events` (server-sent events) on a worker thread and
feeds each snapshot to a `MonitorModel`; reconnects after any failure, with a growing pause.

Qt-free (urllib and a thread), so it runs the same under the GUI, in tests and in `--screenshot`.
Not here: what the snapshot means (model.py) or how it is drawn (widgets/).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator

from strata.monitor.model import FeedError, MonitorModel
from strata.monitor.silence import NOT_ANSWERING, check_interval, feed_patience

EVENT_INTERVAL_S = 0.25      # asks the server for its maximum rate (4 snapshots a second)
RETRY_FIRST_S = 0.5          # first pause after a failed connection
RETRY_MAX_S = 5.0            # the pause doubles up to this
READ_TIMEOUT_S = 10.0        # no event for this long: the connection is treated as dead
READ_CHUNK = 1 << 16         # the most read at once: each piece read tells the model the feed is answering
WATCH_S = 0.5                # how often the model is told the clock (a silent feed's seconds count on the header)


def normalize_url(url: str) -> str:
    """`host:port`, `http://host:port/` or `http://host:port/v1` -> `http://host:port`; ValueError names a bad one."""
    text = (url or "").strip()
    if not text:
        raise ValueError("monitor: --url is empty (example: http://127.0.0.1:8080)")
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"monitor: {url!r} is not an http(s) address (example: http://127.0.0.1:8080)")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise ValueError(f"monitor: {url!r} has an invalid port") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def parse_sse(lines: Iterator[bytes]) -> Iterator[tuple[str, str]]:
    """(event, data) pairs from the lines of a text/event-stream body."""
    event, data = "message", []
    for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


def body_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The lines of a body read in `chunks` as they come, each with its newline (the last one maybe without)."""
    pending: list[bytes] = []
    for chunk in chunks:
        *lines, rest = chunk.split(b"\n")
        for line in lines:
            yield b"".join([*pending, line, b"\n"])
            pending.clear()
        if rest:
            pending.append(rest)
    if pending:
        yield b"".join(pending)


def feed_request(url: str, api_key: str | None) -> urllib.request.Request:
    """A request for the server's feed at `url`, with its API key when it asks for one."""
    req = urllib.request.Request(url, headers={"Accept": "text/event-stream, application/json"})
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    return req


def fetch_snapshot(base: str, api_key: str | None, timeout_s: float = READ_TIMEOUT_S) -> dict:
    """One `GET /v1/monitor` at `base` (`http://host:port`): the monitor's before its stream is up and for
    `--screenshot`, the app's as its server's stop begins (app/supervisor.py: what the stop does)."""
    with urllib.request.urlopen(feed_request(f"{base}/v1/monitor", api_key), timeout=timeout_s) as r:
        return json.loads(r.read())


def wake_reader(sock: socket.socket | None) -> None:
    """Ends at once a read another thread has blocked on `sock`, a feed connection's socket (the reader then
    closes its response), from the request's send to the body's end. A close from here waited for that read (the
    buffered reader's lock): until the server's next bytes or the read timeout, 10 s of a silent server on the
    app's GUI thread (a Quit's or SIGTERM's stop), nothing drawn and nothing answered."""
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)    # the blocked recv returns, as at the server's end of the body
    except OSError:   # closed meanwhile (a closed socket object holds no fd: refused, never another one), or not connected
        pass


def _recording(http_class: type, on_connect: Callable[[socket.socket], None]) -> type:
    """`http_class` (http.client's plain or TLS connection) telling `on_connect` its socket once connected: a
    stop must reach a read before the response exists too (a busy server's headers)."""
    class Recording(http_class):
        def connect(self) -> None:
            super().connect()
            on_connect(self.sock)
    return Recording


def _opener(on_connect: Callable[[socket.socket], None]) -> urllib.request.OpenerDirector:
    """urlopen's opener (proxies, redirects as there) whose connections tell `on_connect` their socket."""
    class Http(urllib.request.HTTPHandler):
        def do_open(self, http_class, req, **kw):
            return super().do_open(_recording(http_class, on_connect), req, **kw)

    class Https(urllib.request.HTTPSHandler):
        def do_open(self, http_class, req, **kw):
            return super().do_open(_recording(http_class, on_connect), req, **kw)
    return urllib.request.build_opener(Http, Https)


# `strata monitor` alone: nothing listens at the address, so say what would
REFUSED_HINT = " (no server listens there: start one with `strata serve` or ./run, or give --url)"


class FeedClient:
    """Start with `start()`, stop with `stop()` (joins the thread). One connection at a time. `refused_hint`
    follows a refused connection's reason: the app, which starts its server itself, gives none."""

    def __init__(self, url: str, model: MonitorModel, api_key: str | None = None,
                 interval_s: float = EVENT_INTERVAL_S, refused_hint: str = REFUSED_HINT) -> None:
        self.base = normalize_url(url)
        self.interval_s = check_interval(interval_s)
        self.model = model
        self.refused_hint = refused_hint
        model.set_target(self.base)
        self.api_key = api_key or None
        # the server sends one snapshot each interval_s and nothing between: neither a timeout nor "not answering" there
        self.read_timeout_s = feed_patience(self.interval_s, READ_TIMEOUT_S)
        model.expect_every(self.interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch_thread: threading.Thread | None = None
        self._unanswered = False    # the last connection was taken but not answered, after a first snapshot
        self._sock: socket.socket | None = None   # the connection's, once connected (stop() wakes its read)
        self._opener = _opener(self._connected)
        self.snapshots = 0          # received since start (tests and the status bar)

    @property
    def events_url(self) -> str:
        return f"{self.base}/v1/monitor/events?interval={self.interval_s:g}"

    def start(self) -> FeedClient:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="strata-monitor-feed", daemon=True)
            self._thread.start()
            self._watch_thread = threading.Thread(target=self._watch, name="strata-monitor-watch", daemon=True)
            self._watch_thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        wake_reader(self._sock)   # after the set: a socket connected since is woken by `_connected`
        for thread in (self._thread, self._watch_thread):
            if thread is not None:
                thread.join(timeout)

    def fetch_once(self) -> dict:
        """One `GET /v1/monitor` (used before the stream is up, and by `--screenshot`)."""
        return fetch_snapshot(self.base, self.api_key)

    # -- worker -------------------------------------------------------------------------------

    def _run(self) -> None:
        pause = RETRY_FIRST_S
        while not self._stop.is_set():
            if not self._unanswered:     # a retry of a server that took no answer goes on saying so, not "connecting"
                self.model.set_connection("connecting", self.base)
            try:
                for event, data in self._events():
                    if event != "snapshot":
                        continue
                    try:
                        self.model.apply(json.loads(data), received=(time.monotonic(), time.time()))
                    except (ValueError, FeedError) as e:
                        self.model.set_connection("connected", f"bad snapshot skipped: {e}")
                        continue
                    self.snapshots += 1
                    pause, self._unanswered = RETRY_FIRST_S, False
                    self.model.set_connection("connected", self.base)
                if not self._stop.is_set():
                    self._unanswered = False
                    self.model.set_connection("disconnected", "the server closed the feed")
            except urllib.error.HTTPError as e:
                detail = f"HTTP {e.code}: " + ("wrong or missing API key (--api-key)" if e.code == 401 else str(e.reason))
                self._unanswered = False
                self.model.set_connection("disconnected", detail)
            except (urllib.error.URLError, OSError, ValueError) as e:
                if self._stop.is_set():
                    break
                reason = getattr(e, "reason", None) or e
                # it took the connection and said nothing (stopped, or too busy): not a server gone
                self._unanswered = isinstance(reason, TimeoutError) and self.snapshots > 0
                if self._unanswered:
                    self.model.set_connection(NOT_ANSWERING, f"no answer from {self.base} in {self.read_timeout_s:g} s")
                else:
                    refused = isinstance(reason, ConnectionRefusedError)   # nothing listens there: say what would
                    hint = self.refused_hint if refused else ""
                    self.model.set_connection("disconnected", f"cannot reach {self.base}: {reason}{hint}")
            except Exception as e:   # e.g. the response closed by stop() while a line was being read
                if self._stop.is_set():
                    break
                self._unanswered = False
                self.model.set_connection("disconnected", f"feed failed: {type(e).__name__}: {e}")
            if self._stop.wait(pause):
                break
            # a try not answered waited its read timeout itself: the next one soon, so a server that goes on is seen at once
            pause = RETRY_FIRST_S if self._unanswered else min(pause * 2, RETRY_MAX_S)

    def _watch(self) -> None:
        """Tells the model the clock while the worker waits on a read (a silent feed gives it nothing else)."""
        while not self._stop.wait(WATCH_S):
            self.model.observe(time.monotonic())

    def _heard(self, chunk: bytes) -> bytes:
        """Tells the model the feed's bytes came (a snapshot over a slow link takes seconds: not a silence)."""
        if chunk:
            self.model.hear((time.monotonic(), time.time()))
        return chunk

    def _events(self) -> Iterator[tuple[str, str]]:
        try:
            resp = self._opener.open(feed_request(self.events_url, self.api_key), timeout=self.read_timeout_s)
            try:
                yield from parse_sse(body_lines(iter(lambda: self._heard(resp.read1(READ_CHUNK)), b"")))
            finally:
                resp.close()
        finally:
            self._sock = None

    def _connected(self, sock: socket.socket) -> None:
        """A feed connection is up (the worker's thread): kept for stop(); a stop begun meanwhile found none."""
        self._sock = sock
        if self._stop.is_set():
            wake_reader(sock)
