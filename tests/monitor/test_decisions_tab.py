"""The Slot decisions tab: a decision without a slot (a park the policy skipped) reads an en dash where a value does
not apply, as every other cell of the window does. A new-user trial's sequential requests on one context showed
`None` in its slot column (the feed's null, written by str())."""

from __future__ import annotations

from strata.monitor.widgets.requests import DECISION_HEADERS

from tests.fixtures.qt import shown_window
from tests.monitor.recorded import recorded_model

NA = "\u2013"


def test_a_skipped_park_has_no_slot_and_says_so_with_a_dash(qtbot):
    def skipped_park(last: dict) -> None:
        # the shape /v1/slots and the feed gave in the trial for slot_policy's ParkDecision(None, "skip", ...)
        last["decisions"] = [*last.get("decisions", []),
                             {"time": last["time"] - 1.0, "request": 6, "slot": None, "group": None, "reason": "skip",
                              "reused": 0, "source_slot": "main", "park": False, "park_skip": "main_low_value",
                              "lost_tokens": 0}]
    window = shown_window(qtbot, recorded_model(skipped_park))
    table = window.activity.decisions
    rows = [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]
    skipped = [row for row in rows if row[DECISION_HEADERS.index("reason")] == "skip"]
    assert len(skipped) == 1, rows
    row = skipped[0]
    assert row[DECISION_HEADERS.index("slot")] == NA and row[DECISION_HEADERS.index("group")] == NA
    assert row[DECISION_HEADERS.index("from slot")] == "main"
    assert row[DECISION_HEADERS.index("park skipped")] == "main_low_value"
    assert not any("None" in cell for row in rows for cell in row), rows
