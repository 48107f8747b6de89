"""A long prompt's time to first token reads in seconds, as every other time the monitor shows: session 40's trial
of a ~6,800-token prompt on the default model (2 shared cores) showed TTFT `90933 ms` in the recent requests, five
digits with no separator beside `2.4 s ago`; a 128k prompt's minutes read `1234567 ms`. Real Qt (offscreen), the
recorded feed of a real server, its last request given such a TTFT."""

from __future__ import annotations

import pytest
from strata.monitor import units
from strata.monitor.widgets.requests import REQUEST_HEADERS

from tests.fixtures.qt import settle, shown_window
from tests.monitor.recorded import recorded_model

TTFT = REQUEST_HEADERS.index("TTFT")


@pytest.mark.parametrize("ttft_ms, shown", [(90933.0, "1 min 30 s"), (12345.0, "12.3 s"), (1234567.0, "20 min 34 s"), (999.4, "999 ms"), (999.7, "1.0 s"),
                                            (185.0, "185 ms"), (4.25, "4.2 ms")])
def test_a_long_ttft_reads_in_seconds(qtbot, ttft_ms, shown):
    def edit(snap: dict) -> None:
        snap["requests"][-1]["ttft_ms"] = ttft_ms

    w = shown_window(qtbot, recorded_model(edit), (1280, 800))
    w.redraw(force=True)
    settle(qtbot, w)
    table = w.activity.requests
    assert table.item(0, TTFT).text() == shown
    assert units.ms(ttft_ms) == shown
