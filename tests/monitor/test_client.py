"""The feed client against a real server: snapshots arrive over SSE, the API key is sent, a wrong key
and an unreachable address are reported in words, and stop() ends the thread."""

from __future__ import annotations

import time

import pytest
from strata.monitor.client import FeedClient, normalize_url, parse_sse
from strata.monitor.model import MonitorModel

from tests.monitor import traffic
from tests.monitor.conftest import API_KEY


def wait_for(cond, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("raw, url", [
    ("127.0.0.1:8080", "http://127.0.0.1:8080"), ("http://h:1/", "http://h:1"),
    ("http://h:1/v1", "http://h:1"), ("https://example.org/strata/", "https://example.org/strata"),
])
def test_normalize_url(raw, url):
    assert normalize_url(raw) == url


@pytest.mark.parametrize("raw, message", [("", "empty"), ("ftp://h", "not an http"), ("http://h:99999", "port")])
def test_bad_urls_are_named(raw, message):
    with pytest.raises(ValueError, match=message):
        normalize_url(raw)


def test_parse_sse():
    body = [b": comment\n", b"event: snapshot\n", b"data: {\"a\":\n", b"data: 1}\n", b"\n", b"data: x\n", b"\n"]
    assert list(parse_sse(iter(body))) == [("snapshot", "{\"a\":\n1}"), ("message", "x")]


def test_snapshots_arrive_with_the_api_key(keyed_server):
    model = MonitorModel()
    client = FeedClient(keyed_server.url, model, api_key=API_KEY).start()
    try:
        assert wait_for(lambda: client.snapshots >= 2)
        view = model.view()
        assert view.connection == "connected"
        assert view.snapshot["endpoint"].startswith("http://127.0.0.1")
        traffic.chat(keyed_server.url, [{"role": "user", "content": "hello"}], api_key=API_KEY)
        assert wait_for(lambda: len(model.view().requests) >= 1)
        assert client.fetch_once()["time"] > 0
    finally:
        client.stop()
    assert not client._thread.is_alive()


def test_a_wrong_key_is_reported(keyed_server):
    model = MonitorModel()
    client = FeedClient(keyed_server.url, model, api_key="wrong").start()
    try:
        assert wait_for(lambda: model.view().connection == "disconnected")
        assert "API key" in model.view().connection_detail
        assert client.snapshots == 0
    finally:
        client.stop()


def test_an_unreachable_server_is_reported_and_retried():
    model = MonitorModel()
    url = f"http://127.0.0.1:{traffic.free_port()}"
    client = FeedClient(url, model).start()
    try:
        assert wait_for(lambda: model.view().connection == "disconnected")
        assert f"cannot reach {url}" in model.view().connection_detail
        # what to do, not only errno 111 (a new user's monitor on a server not started yet)
        assert "no server listens there: start one with `strata serve` or ./run, or give --url" in \
            model.view().connection_detail
        first = model.version
        assert wait_for(lambda: model.version > first + 1)   # it keeps trying (connecting, disconnected, ...)
    finally:
        client.stop()
    assert not client._thread.is_alive()


def test_the_apps_client_gives_no_advice_to_start_a_server_by_hand():
    """The app starts its server itself (and the packaged app has no `strata serve`): while it restarts a
    crashed one, its header said 'start one with `strata serve` or ./run'."""
    model = MonitorModel()
    url = f"http://127.0.0.1:{traffic.free_port()}"
    client = FeedClient(url, model, refused_hint="").start()
    try:
        assert wait_for(lambda: model.view().connection == "disconnected")
        assert model.view().connection_detail.startswith(f"cannot reach {url}: ")
        assert "strata serve" not in model.view().connection_detail
    finally:
        client.stop()
