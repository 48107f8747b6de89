"""While the server loads its model, the header counts the load's time: `loading the model — 42 s so far`. It said
a static `loading the model` for as long as the load took (minutes for a big model), which a new-user trial read as a
hang; and the cache panel said "No conversation cache in this server's feed." meanwhile, as if it had none. The
snapshots are in the shape the server's feed sends while it loads (server/monitor_feed.py snapshot with no engine
yet: time, version, endpoint, info_line, ready false, log_tail)."""

from __future__ import annotations

from strata.monitor import units
from strata.monitor.model import MonitorModel

from tests.fixtures.qt import settle, shown_window


def loading(t: float) -> dict:
    return {"time": t, "version": "0.1.0", "endpoint": "http://127.0.0.1:8080", "info_line": "", "ready": False,
            "log_tail": []}


def header_state(window) -> str:
    window.redraw()
    return window.header.state.text().replace(units.NBSP, " ")


def test_the_header_counts_the_load(qtbot):
    model = MonitorModel()
    model.set_connection("connected")
    model.apply(loading(1000.0))
    window = shown_window(qtbot, model)
    assert "<b>loading the model</b> \u2014 0 s so far" in header_state(window)
    # and the cache panel says what it waits for: it said "No conversation cache in this server's feed."
    assert window.cache.summary.text() == "Waiting for the server to load its model..."
    for t in (1000.25, 1010.0, 1042.7):
        model.apply(loading(t))
    assert "<b>loading the model</b> \u2014 42 s so far" in header_state(window)
    model.apply(loading(1185.2))
    assert "<b>loading the model</b> \u2014 3 min 05 s so far" in header_state(window)
    assert abs(model.view().loading_s - 185.2) < 1e-6
    ready = dict(loading(1190.0), ready=True)
    model.apply(ready)
    settle(qtbot, window)
    state = header_state(window)
    assert "<b>connected</b>" in state and "so far" not in state, state
    assert window.cache.summary.text() == "No conversation cache in this server's feed."   # ready, and none in it
    assert model.view().loading_s is None
    # a later load (a restarted server) counts from its own first snapshot
    model.apply(loading(2000.0))
    model.apply(loading(2003.0))
    assert "<b>loading the model</b> \u2014 3 s so far" in header_state(window)


def test_a_failed_load_says_the_error_not_a_count(qtbot):
    model = MonitorModel()
    model.set_connection("connected")
    model.apply(dict(loading(1000.0), error="the model could not be loaded: damaged"))
    window = shown_window(qtbot, model)
    state = header_state(window)
    assert "failed: the model could not be loaded: damaged" in state and "so far" not in state, state
    assert window.cache.summary.text() == "No conversation cache in this server's feed."


def test_a_restarted_servers_load_counts_from_its_own_start(qtbot):
    # the app's Restart during a load (or a server that died loading and was restarted on the same address): the
    # feed goes, then comes back from the new server, still loading; its count began again with the new server's
    # first snapshot, where it went on from the first server's (the status bar counting the new one's)
    model = MonitorModel()
    model.set_connection("connected")
    model.apply(loading(1000.0))
    model.apply(loading(1100.0))
    window = shown_window(qtbot, model)
    assert "<b>loading the model</b> \u2014 1 min 40 s so far" in header_state(window)
    model.set_connection("waiting", "for the server to stop")     # controller._stop_following; the feed's end alike
    model.set_connection("connecting", "http://127.0.0.1:8080")
    model.set_connection("connected", "http://127.0.0.1:8080")
    model.apply(loading(1130.0))
    model.apply(loading(1135.0))
    assert "<b>loading the model</b> \u2014 5 s so far" in header_state(window)
    assert abs(model.view().loading_s - 5.0) < 1e-6


def test_a_server_gone_during_its_load_is_not_waited_for_in_the_cache_panel(qtbot):
    # a server killed while it loaded (the OOM killer) and given up on: the header says the server failed, and the
    # cache panel said "Waiting for the server to load its model..." beside it (the last snapshot still loading)
    model = MonitorModel()
    model.set_connection("connected")
    model.apply(loading(1000.0))
    window = shown_window(qtbot, model)
    header_state(window)
    assert window.cache.summary.text() == "Waiting for the server to load its model..."
    model.set_connection("disconnected", "server failed: gave up after 5 restarts in a row: server killed by SIGKILL")
    state = header_state(window)
    assert "server failed" in state and "so far" not in state, state
    assert window.cache.summary.text() == "No data: not connected (the header says why).", window.cache.summary.text()
