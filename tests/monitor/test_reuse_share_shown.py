"""The reused share in the header and the requests table says "100 %" only when all of the prompt was reused. A
new-user trial's second start (its conversations restored from disk, one token of each request read) showed
"reused 100 %" for 5,535 of 5,553 prompt tokens and "646 (100 %)" for 646 of 647; now "99.6 %" and "99.8 %"."""

from __future__ import annotations

from strata.monitor import units
from strata.monitor.widgets.requests import REQUEST_HEADERS

from tests.fixtures.qt import shown_window
from tests.monitor.recorded import recorded_model


def test_nearly_all_reused_is_not_shown_as_all(qtbot):
    def restored(last: dict) -> None:
        last["totals"].update(prompt_tokens=5553, prompt_tokens_reused=5535, prompt_tokens_read=18)
        last["requests"][0].update(prompt_tokens=647, reused_tokens=646)
        last["requests"][1].update(prompt_tokens=647, reused_tokens=647)
    window = shown_window(qtbot, recorded_model(restored))
    assert "reused 99.6 %" in window.header.totals.text().replace(units.NBSP, " "), window.header.totals.text()
    table = window.activity.requests
    col = REQUEST_HEADERS.index("reused\ntok (share)")
    cells = [table.item(r, col).text() for r in range(table.rowCount())]
    assert "646 (99.8 %)" in cells and "647 (100 %)" in cells, cells
