"""What the monitor window draws, and when (strata.monitor.redraw_policy): nothing while it is hidden or
minimized; while the server is idle one redraw a second and a changed headline (connection, work starting, the
count of requests) at the next timer tick; while it is busy at most two redraws a second, none of them later
than half a second. The window is real (offscreen), fed the
recorded snapshots; its clock is stepped by the test instead of waited for."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication
from strata.monitor import units
from strata.monitor.model import MonitorModel
from strata.monitor.redraw_policy import BUSY_INTERVAL_S, IDLE_INTERVAL_S, TICK_S, redraw_due, server_busy
from strata.monitor.widgets.common import Table
from strata.monitor.window import MonitorWindow

from tests.fixtures.qt import settle

DATA = Path(__file__).resolve().parents[1] / "data" / "monitor"


def snapshot(state: str, t: float, in_flight: int = 0) -> dict:
    s = copy.deepcopy(json.loads((DATA / "series.json").read_text(encoding="utf-8"))[-1])
    s["time"] = t
    for slot in s["slots"]:
        slot["state"] = state
    s["totals"]["in_flight"] = in_flight
    return s


class PaintCounter(QObject):
    """Counts the paint events of a window's widgets (Qt's drawing, whatever asked for it)."""

    def __init__(self, window) -> None:
        super().__init__()
        self.window, self.paints = window, 0

    def eventFilter(self, obj, event):  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.Paint and obj.isWidgetType() and obj.window() is self.window:
            self.paints += 1
        return False


class PaintRecorder(QObject):
    """The regions of the paint events of the widget it filters, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.regions: list = []

    def eventFilter(self, obj, event):  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.Paint:
            self.regions.append(event.region())
        return False


@pytest.fixture
def stepped(qtbot):
    """A shown window on a model, its timer stopped and its clock in the test's hands."""
    model = MonitorModel()
    model.set_connection("connected", "")
    model.apply(snapshot("idle", 1000.0))
    w = MonitorWindow(model, theme="light")
    qtbot.addWidget(w)
    w.timer.stop()
    clock = [0.0]
    w.clock = lambda: clock[0]
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    w.tick()
    settle(qtbot, w)                  # laid out and painted: what is painted after, the test asked for
    return w, model, clock


def test_the_policy():
    assert redraw_due(new_data=True, can_be_seen=True, busy=False, since_last_draw_s=0.0, headline_changed=True)
    assert not redraw_due(new_data=True, can_be_seen=True, busy=False, since_last_draw_s=2 * TICK_S)
    assert redraw_due(new_data=True, can_be_seen=True, busy=False, since_last_draw_s=4 * TICK_S)
    assert not redraw_due(new_data=False, can_be_seen=True, busy=False, since_last_draw_s=9.0, headline_changed=True)
    assert not redraw_due(new_data=True, can_be_seen=False, busy=False, since_last_draw_s=9.0, headline_changed=True)
    assert not redraw_due(new_data=True, can_be_seen=True, busy=True, since_last_draw_s=TICK_S)
    assert not redraw_due(new_data=True, can_be_seen=True, busy=True, since_last_draw_s=TICK_S, headline_changed=True)
    assert redraw_due(new_data=True, can_be_seen=True, busy=True, since_last_draw_s=2 * TICK_S)
    assert BUSY_INTERVAL_S <= 2 * TICK_S             # a busy server's values are never a second old
    assert IDLE_INTERVAL_S <= 4 * TICK_S             # an idle one's (its scrolling plots) a second at most


def test_an_idle_server_is_drawn_once_a_second_and_its_turn_to_busy_at_once(stepped):
    """An idle server's snapshots move only the plots' time and its memory figures: drawn once a second (each
    one was drawn: 4 redraws a second of an idle window left open all day). Work starting is not held back."""
    w, model, clock = stepped
    first = snapshot("idle", 1000.0)
    first["totals"]["requests"] += 1             # a request ended: drawn at once, at the test's time 0
    model.apply(first)
    w.tick()
    assert w._drawn_version == model.version
    drawn = []
    for i in range(1, 13):                      # three idle seconds at 4 snapshots a second
        s = snapshot("idle", 1000.0 + i * TICK_S)
        s["totals"]["requests"] = first["totals"]["requests"]
        s["totals"]["ram_mib"] = 500 + i         # (a figure that moves on an idle server)
        model.apply(s)
        clock[0] = i * TICK_S
        before = w._drawn_version
        w.tick()
        drawn.append(w._drawn_version != before)
        assert w._drawn_version >= model.version - 3      # never more than a second behind
    assert sum(drawn) == 3, drawn
    model.apply(snapshot("decode", 1000.0 + 13 * TICK_S, in_flight=1))
    clock[0] = 13 * TICK_S
    w.tick()
    assert w._drawn_version == model.version and w._drawn_busy


def test_busy_means_a_slot_at_work_or_a_request_in_flight():
    for state, in_flight, busy in (("idle", 0, False), ("decode", 0, True), ("prefill", 0, True), ("idle", 1, True)):
        m = MonitorModel()
        m.apply(snapshot(state, 1.0, in_flight))
        assert server_busy(m.view()) is busy, (state, in_flight)
    assert server_busy(MonitorModel().view()) is False


def test_an_idle_servers_new_request_count_is_on_screen_at_the_next_tick(stepped):
    w, model, clock = stepped
    for i in range(1, 5):
        s = snapshot("idle", 1000.0 + i * TICK_S)
        s["totals"]["requests"] = 1000 + i
        model.apply(s)
        clock[0] = i * TICK_S
        w.tick()
        assert f"{units.count(1000 + i)} requests" in w.header.totals.text().replace(units.NBSP, " ")


def test_a_busy_server_is_drawn_twice_a_second(stepped):
    w, model, clock = stepped
    drawn = []
    for i in range(1, 13):                      # three seconds of feed at 4 snapshots a second
        model.apply(snapshot("decode", 1000.0 + i * TICK_S, in_flight=2))
        clock[0] = i * TICK_S
        before = w._drawn_version
        w.tick()
        drawn.append(w._drawn_version != before)
        assert w._drawn_version >= model.version - 1      # never more than one snapshot (0.25 s) behind
    assert sum(drawn) == 6, drawn
    model.apply(snapshot("idle", 1000.0 + 13 * TICK_S))   # idle again: the next tick draws it, and each after
    clock[0] = 13 * TICK_S
    w.tick()
    clock[0] = 14 * TICK_S
    w.tick()
    assert w._drawn_version == model.version


@pytest.mark.parametrize("how", ["minimized", "hidden"])
def test_a_window_that_cannot_be_seen_draws_nothing(stepped, qtbot, how):
    w, model, clock = stepped
    counter = PaintCounter(w)
    QApplication.instance().installEventFilter(counter)
    try:
        w.showMinimized() if how == "minimized" else w.hide()
        qtbot.waitUntil(lambda: not w.can_be_seen(), timeout=60_000)
        qtbot.wait(50)                             # what was pending when it went
        counter.paints = 0
        drawn = w._drawn_version
        for i in range(1, 9):
            model.apply(snapshot("decode", 1000.0 + i * TICK_S, in_flight=1))
            clock[0] = i * TICK_S
            w.tick()
            QApplication.processEvents()
        assert w._drawn_version == drawn and counter.paints == 0
        w.showNormal()
        qtbot.waitUntil(w.can_be_seen, timeout=60_000)
        clock[0] += TICK_S
        w.tick()                                   # back in view: the latest snapshot at the next tick
        assert w._drawn_version == model.version
    finally:
        QApplication.instance().removeEventFilter(counter)


def test_a_changed_cell_is_repainted(qtbot):
    """show_rows holds the model's signals while it writes and then tells the view once: the view still
    repaints the changed cell (without that one signal the old text stayed on screen: no paint came)."""
    t = Table(("a", "b"))
    qtbot.addWidget(t)
    t.resize(300, 120)
    t.show()
    qtbot.waitExposed(t)
    t.show_rows([["one", "1"], ["two", "2"]])
    qtbot.wait(50)
    painted = PaintRecorder()
    t.viewport().installEventFilter(painted)
    t.show_rows([["one", "1"], ["two", "22222"]])
    cell = t.visualItemRect(t.item(1, 1))
    qtbot.waitUntil(lambda: any(r.intersects(cell) for r in painted.regions), timeout=60_000)
    assert t.item(1, 1).text() == "22222"


def test_a_redraw_leaves_an_unchanged_tab_bar_alone(stepped, qtbot):
    """The requests tab's title is set only when its count changes: setTabText lays the tab bar out and
    repaints it, with the tabs around it, even when the text is the same (~2.5 ms of a 16-ms busy redraw)."""
    w, model, clock = stepped
    painted = PaintRecorder()
    w.activity.tabBar().installEventFilter(painted)
    s = snapshot("idle", 1000.0 + TICK_S)
    s["totals"]["requests"] += 1
    model.apply(s)
    clock[0] = TICK_S
    w.tick()
    qtbot.wait(100)
    assert w._drawn_version == model.version and f"{units.count(s['totals']['requests'])} requests" in w.header.totals.text().replace(units.NBSP, " ")
    assert painted.regions == []
