"""The header's INFO line is the server's start-up line, and says so: a new-user trial read its "ram 5888 MiB on
(0 entries)" (the cache as found at start-up) against the levels table's current entries as two counts of one thing.
The row is named for when it was written, and its tooltip says the panels below hold the current figures."""

from __future__ import annotations

from tests.fixtures.qt import shown_window
from tests.monitor.recorded import recorded_model


def test_the_info_row_says_it_is_the_start_up_line(qtbot):
    def started_empty(last: dict) -> None:
        last["info_line"] = ("strata: model tiny (llama) | conversation cache: park target ram; ram 64 MiB on "
                             "(0 entries) | listening on http://127.0.0.1:8080")
    window = shown_window(qtbot, recorded_model(started_empty))
    header = window.header
    assert "(0 entries)" in header.info.text()
    names = [lab.text() for lab in header.row_names.values()]
    assert names == ["<b>Model</b>", "<b>Now</b>", "<b>At start</b>"], names
    for tip in (header.info.toolTip(), header.row_names["At start"].toolTip()):
        assert "written once when it started" in tip and "current figures" in tip, tip
