"""While the feed is lost, the `when` columns say their ages count to the loss. They count to the latest snapshot,
and nothing new is drawn meanwhile: session 40's trial killed a real `strata serve` under two clients, and 13 s
later the recent requests still said the last one ended `312 ms ago`, under a bare `when` (the admission decisions
and slot decisions alike). Real Qt (offscreen), the recorded feed of a real server, then the feed lost and back."""

from __future__ import annotations

from strata.monitor.widgets.common import AGES_AT_LOSS

from tests.fixtures.qt import settle, shown_window
from tests.monitor.recorded import recorded_model


def headers(w) -> list[str]:
    requests = w.activity.requests
    return [requests.horizontalHeaderItem(requests.columnCount() - 1).text(),
            w.activity.decisions.horizontalHeaderItem(0).text(), w.cache.decisions.horizontalHeaderItem(0).text()]


def test_the_when_columns_say_they_count_to_the_loss(qtbot, artifacts):
    m = recorded_model(lambda snap: None)
    w = shown_window(qtbot, m, (1280, 800))
    assert headers(w) == ["when"] * 3
    m.set_connection("disconnected", "cannot reach http://127.0.0.1:8080: [Errno 111] Connection refused")
    w.redraw()
    settle(qtbot, w)
    assert headers(w) == [AGES_AT_LOSS] * 3            # before: "when", ages frozen as if current
    requests = w.activity.requests
    assert requests.item(0, requests.columnCount() - 1).text().endswith(" ago")     # the ages themselves kept
    assert w.grab().save(str(artifacts / "ages-at-the-loss.png"))
    m.set_connection("connected", "http://127.0.0.1:8080")
    w.redraw()
    assert headers(w) == ["when"] * 3


def test_no_loss_is_said_before_any_snapshot(qtbot):
    """Review of a5b0522: the header said 'at the loss' whenever the feed was not flowing, so also before its
    first snapshot (`strata monitor` started before the server, the app waiting for its model file or starting
    its server): empty tables under a loss that never happened."""
    from strata.monitor.model import MonitorModel

    m = MonitorModel()
    for state, detail in (("connecting", "http://127.0.0.1:8080"),
                          ("disconnected", "cannot reach http://127.0.0.1:8080: [Errno 111] Connection refused"),
                          ("waiting", "for the model file")):
        m.set_connection(state, detail)
        w = shown_window(qtbot, m, (1280, 800))
        w.redraw(force=True)
        assert headers(w) == ["when"] * 3, state
