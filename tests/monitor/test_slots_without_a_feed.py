"""The slots table once the feed stops flowing (the app stopping or restarting its server, a server down, the feed
lost): what a context does now and when it was last used read as unknown, as the header's running and queued do.
A new-user trial quit the app while an answer streamed: for the whole stop the table said main `decode`, last use
`now` (in the busy colour), under a header that said the app was waiting for the server to stop."""

from __future__ import annotations

import pytest
from strata.monitor.model import MonitorModel
from strata.monitor.widgets.slots import HEADERS
from strata.monitor.window import MonitorWindow

from tests.fixtures.qt import shown_window
from tests.monitor.recorded import recorded_model

NA = "\u2013"


@pytest.fixture
def decoding():
    """A model whose latest snapshot (recorded from a real server) has main decoding, the feed flowing."""
    def main_decodes(last: dict) -> None:
        last["slots"][0]["state"] = "decode"
    return recorded_model(main_decodes)


def _column(window, name):
    table, c = window.slots.table, HEADERS.index(name)
    return [table.item(r, c).text() for r in range(table.rowCount())]


def test_a_slot_reads_unknown_once_the_feed_stops(qtbot, decoding):
    window = shown_window(qtbot, decoding)
    table, state = window.slots.table, HEADERS.index("state")
    assert _column(window, "state")[0] == "decode" and _column(window, "last\nuse")[0] == "now"
    assert table.item(0, state).foreground().color().name() == window.theme.good
    held = _column(window, "held\ntok (filled)")

    decoding.set_connection("waiting", "for the server to stop")          # what the app's Quit and Restart set
    window.redraw()
    assert _column(window, "state") == [NA] * table.rowCount()
    assert _column(window, "last\nuse") == [NA] * table.rowCount()
    assert table.item(0, state).foreground().color().name() != window.theme.good
    assert _column(window, "held\ntok (filled)") == held                  # what each holds stays as last seen

    decoding.set_connection("connected", "http://127.0.0.1:8080")          # the feed flows again
    window.redraw()
    assert _column(window, "state")[0] == "decode" and _column(window, "last\nuse")[0] == "now"


@pytest.mark.parametrize(("connection", "said"), [("connecting", "Waiting for the server..."),
                                                  ("waiting", "Waiting for the server..."),
                                                  ("disconnected", "No data: not connected (the header says why).")])
def test_the_cache_panel_waits_only_for_a_server_that_is_coming(qtbot, connection, said):
    """Before any snapshot the cache panel said "Waiting for the server..." whatever the header said: under the app's
    `server failed: ... could not load its model` (a trial's damaged model file, nothing to wait for) too."""
    model = MonitorModel()
    model.set_connection(connection, "server failed: the server could not load its model"
                         if connection == "disconnected" else "")
    window = MonitorWindow(model, theme="light")
    qtbot.addWidget(window)
    window.show()
    window.redraw(force=True)
    assert window.cache.summary.text() == said
