"""A server that was answering and stops is said to be not answering, for how long and since when, not
"connecting". Session 40's trial stopped a real `strata serve` (SIGSTOP): the header said `connected` for the read
timeout's 10 s, then `connecting` (the retries' connections taken by the stopped process's socket and never
answered), which read as if the monitor had never connected. Real server in a subprocess, real feed client, real Qt
(offscreen); the screenshot is test-artifacts/monitor/not-answering.png."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from strata.monitor.client import READ_TIMEOUT_S, FeedClient
from strata.monitor.model import MonitorModel
from strata.monitor.silence import SILENT_AFTER_S

from tests.fixtures.qt import shown_window
from tests.server.body_fuzz import start_serve, stop_serve

SAID = re.compile(r"not answering</b> for (\d+) s \(last answer (\d\d:\d\d:\d\d)\)")


def _state_text(w) -> str:
    return w.header.state.text()


def test_a_stopped_server_reads_not_answering_then_connected(qtbot, tiny_model_factory, tmp_path, artifacts):
    served = start_serve(str(tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)), tmp_path)
    model = MonitorModel()
    client = FeedClient(served.url, model).start()
    stopped = False
    try:
        w = shown_window(qtbot, model, (1280, 800))
        qtbot.waitUntil(lambda: "<b>connected</b>" in _state_text(w), timeout=30_000)
        os.kill(served.proc.pid, signal.SIGSTOP)
        stopped, stopped_at = True, time.monotonic()
        seen: list[tuple[float, str]] = []
        # past the read timeout: the feed's stream given up on, then a retry the stopped socket takes and never answers
        while time.monotonic() - stopped_at < READ_TIMEOUT_S + 4:
            qtbot.wait(250)
            seen.append((time.monotonic() - stopped_at, _state_text(w)))
        said = [(t, text) for t, text in seen if t > SILENT_AFTER_S + 1.5]
        wrong = [(round(t, 1), text) for t, text in said if not SAID.search(text)]
        assert not wrong, wrong[:3]          # before: "connected" for 10 s, then "connecting"
        assert not any("connecting" in text for _, text in seen), [x for x in seen if "connecting" in x[1]][:2]
        counts = [int(SAID.search(text).group(1)) for _, text in said]
        assert counts == sorted(counts) and counts[-1] >= READ_TIMEOUT_S + 1, counts    # its seconds count on
        assert model.view().connection_detail.startswith("no answer from"), model.view().connection_detail
        last = SAID.search(said[-1][1]).group(2)
        stopped_wall = time.time() - (time.monotonic() - stopped_at)
        apart = (_seconds_of_day(last) - _seconds_of_day(time.strftime("%H:%M:%S", time.localtime(stopped_wall)))) % 86400
        assert min(apart, 86400 - apart) <= 2, (last, stopped_wall)     # the last answer came as it stopped
        assert w.grab().save(str(artifacts / "not-answering.png"))
        os.kill(served.proc.pid, signal.SIGCONT)
        stopped = False
        qtbot.waitUntil(lambda: "<b>connected</b>" in _state_text(w), timeout=int(READ_TIMEOUT_S * 1000))
        assert "not answering" not in _state_text(w)
    finally:
        if stopped:
            os.kill(served.proc.pid, signal.SIGCONT)
        client.stop()
        stop_serve(served)


def _seconds_of_day(hms: str) -> int:
    h, m, s = (int(x) for x in hms.split(":"))
    return h * 3600 + m * 60 + s


def test_silence_is_said_past_its_bound_counted_each_second_and_ends_at_the_next_snapshot():
    m = MonitorModel(silent_after_s=2.0)
    m.set_connection("connected", "http://127.0.0.1:8080")
    m.apply({"time": 1000.0, "mono": 50.0}, received=(10.0, 1000.5))
    m.observe(11.9)
    assert m.view().connection == "connected"
    m.observe(12.0)
    v = m.view()
    assert (v.connection, v.silent_s, v.last_answer, v.gaps) == ("not answering", 2.0, 1000.5, (50.0,))
    assert v.feed_lost and m.headline()[0] == "not answering"
    m.observe(12.6)
    assert m.version == v.version            # the same whole second: nothing new to draw
    m.observe(13.0)
    assert m.version > v.version and m.view().silent_s == 3.0
    m.apply({"time": 1003.0, "mono": 53.0}, received=(13.1, 1003.6))
    assert m.view().connection == "connected" and m.view().gaps == (50.0,)


def test_a_silence_before_any_snapshot_is_not_said():
    m = MonitorModel(silent_after_s=1.0)
    m.set_connection("connected", "x")
    m.observe(1e6)
    assert m.view().connection == "connected" and m.view().silent_s is None


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "3", True])
def test_a_bad_silence_bound_is_named(bad):
    with pytest.raises(ValueError, match=re.escape(f"silent_after_s must be a number of seconds above 0, got {bad!r}")):
        MonitorModel(silent_after_s=bad)
