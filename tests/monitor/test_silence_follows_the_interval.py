"""A monitor that asks for a snapshot every S seconds waits S between them: its "not answering" bound (and its read
timeout) follow the interval it asked, or a monitor asking every 4 s called each wait a silence (review of 69eecfb:
the 3 s bound was fixed whatever the interval). Real `strata serve` in a subprocess, real feed client."""

from __future__ import annotations

import re
import time

import pytest
from strata.monitor.client import READ_TIMEOUT_S, FeedClient
from strata.monitor.model import MonitorModel
from strata.monitor.silence import SILENT_AFTER_S, SILENT_INTERVALS, feed_patience

from tests.server.body_fuzz import start_serve, stop_serve


def test_a_long_interval_is_not_called_a_silence(tiny_model_factory, tmp_path):
    served = start_serve(str(tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)), tmp_path)
    model = MonitorModel()
    client = FeedClient(served.url, model, interval_s=4.0).start()
    try:
        deadline = time.monotonic() + 30
        while model.view().connection != "connected" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert model.view().connection == "connected"
        seen = set()
        until = time.monotonic() + 10        # two and a half intervals: a 3 s bound said it in each
        while time.monotonic() < until:
            seen.add(model.view().connection)
            time.sleep(0.1)
        assert seen == {"connected"}, seen
        assert client.snapshots >= 3
    finally:
        client.stop()
        stop_serve(served)


def test_the_bounds_follow_the_interval():
    assert feed_patience(0.25, SILENT_AFTER_S) == SILENT_AFTER_S        # the default feed: as before
    assert feed_patience(0.25, READ_TIMEOUT_S) == READ_TIMEOUT_S
    assert feed_patience(5.0, SILENT_AFTER_S) == SILENT_INTERVALS * 5.0
    assert FeedClient("http://127.0.0.1:9", MonitorModel(), interval_s=20.0).read_timeout_s == SILENT_INTERVALS * 20.0
    m = MonitorModel(silent_after_s=2.0)
    m.expect_every(1.0)
    m.set_connection("connected", "x")
    m.apply({"time": 1000.0, "mono": 50.0}, received=(10.0, 1000.5))
    m.observe(12.9)
    assert m.view().connection == "connected"
    m.observe(13.0)
    assert m.view().connection == "not answering"


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "1", True])
def test_a_bad_interval_is_named(bad):
    with pytest.raises(ValueError, match=re.escape(f"interval must be a number of seconds above 0, got {bad!r}")):
        FeedClient("http://127.0.0.1:9", MonitorModel(), interval_s=bad)
