"""The admission panel's decisions table shows each decision whole ("restore (disk_hit)"): it was the column
that took what the others left, 26 px in a new-user trial's 1024x640 window ("ra…", "re…") and "restore (disk_…"
at 1280x800. The floor column takes the rest now, elided (its tooltip holds it), and the table scrolls sideways
only when even that is too narrow."""

from __future__ import annotations

import pytest
from strata.monitor.widgets.cache import DECISION_HEADERS

from tests.fixtures.qt import shown_window
from tests.monitor.recorded import recorded_model

DECISION = DECISION_HEADERS.index("decision\n(source)")
FLOOR = DECISION_HEADERS.index("floor,\nneeds")


@pytest.mark.parametrize("size", [(1280, 800), (1024, 640), (960, 540), (800, 600)])
def test_every_decision_is_shown_whole(qtbot, size):
    w = shown_window(qtbot, recorded_model(lambda last: None), size)
    table = w.cache.decisions
    texts = [table.item(r, DECISION).text() for r in range(table.rowCount())]
    assert "restore (disk_hit)" in texts and "save system_prompt (park)" in texts, texts
    widest = max(table.fontMetrics().horizontalAdvance(t) for t in texts)
    assert table.columnWidth(DECISION) > widest, (table.columnWidth(DECISION), widest)
    floor = table.item(0, FLOOR)
    assert floor.toolTip() == floor.text() == "parking, 2.5 GiB"
    if size[0] >= 1280:      # room for all of it: nothing scrolled off to the right
        assert table.horizontalScrollBar().maximum() == 0, [table.columnWidth(i) for i in range(3)]
