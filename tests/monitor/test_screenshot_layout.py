"""A screenshot shows the layout of what it shows: save_png drew the new texts in the last layout, which waits
for the event loop. The end-to-end app test's picture after a restart said 'connected' in the room the long
disconnection reason had taken, the endpoint cut to 'http://127.0.0.1:363' under the Copy address button."""

from __future__ import annotations

from strata.monitor.window import MonitorWindow

from tests.fixtures.qt import settle
from tests.monitor.test_small_windows import five_contexts


def test_a_screenshot_is_laid_out_for_what_it_shows(qtbot, tmp_path):
    m = five_contexts()
    m.set_target("http://127.0.0.1:36327")
    w = MonitorWindow(m, theme="light")
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    m.set_connection("disconnected", "cannot reach http://127.0.0.1:36327: [Errno 111] Connection refused (no "
                     "server listens there: start one with `strata serve` or ./run, or give --url)")
    w.redraw()
    settle(qtbot, w)
    assert w.header.state.width() > 600              # the reason takes the row
    m.set_connection("connected", "http://127.0.0.1:36327")
    w.save_png(tmp_path / "shot.png")                # no event loop in between, as in --screenshot's timer
    header = w.header
    assert header.state.width() < 200, header.state.width()
    assert header.endpoint.width() >= header.endpoint.sizeHint().width()
