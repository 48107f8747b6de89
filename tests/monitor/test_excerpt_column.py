"""The requests table's "text there" column (the prompt's text where it stopped matching: the key diagnostic)
keeps room for its excerpt: Qt's stretch gave it what the other columns left, ~18 px ('6\u2026') in a 1280-px
window of the app. Now at least EXCERPT_MIN_CHARS characters, more when the window has room (no sideways scroll
at 1280 px), the table scrolling sideways in a smaller window; the cell's tooltip holds the whole excerpt."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from strata.monitor.model import MonitorModel
from strata.monitor.widgets.requests import EXCERPT_MIN_CHARS, REQUEST_HEADERS

from tests.fixtures.qt import shown_window

DATA = Path(__file__).resolve().parents[1] / "data" / "monitor"
TEXTS = ["6 files changed, 41 insertions(+), 3 deletions(-)\n", "<|im_start|>user\nThe test still fails: ",
         "time 0005. You are a coding agent", "2] please look at src/app.py"]
TEXT_THERE = REQUEST_HEADERS.index("text\nthere")


def mismatching_model() -> MonitorModel:
    """The recorded series with every request's prompt stopping matching where its reuse ended."""
    m = MonitorModel()
    for snap in json.loads((DATA / "series.json").read_text(encoding="utf-8")):
        snap = copy.deepcopy(snap)
        for i, r in enumerate(snap.get("requests") or []):
            r["mismatch_at"], r["mismatch_excerpt"] = r.get("reused_tokens") or 0, TEXTS[i % len(TEXTS)]
        m.apply(snap)
    m.set_connection("connected", "http://127.0.0.1:8080")
    return m


@pytest.mark.parametrize("size", [(1280, 800), (800, 600)])
def test_the_excerpt_column_has_room_and_its_tooltip_all_of_it(qtbot, size):
    w = shown_window(qtbot, mismatching_model(), size)
    table = w.activity.requests
    least = table.fontMetrics().averageCharWidth() * EXCERPT_MIN_CHARS + 8     # and the cell's margins
    assert table.columnWidth(TEXT_THERE) >= least, (table.columnWidth(TEXT_THERE), least)
    if size[0] >= 1280:   # every column in view: nothing scrolled off to the right
        assert table.horizontalScrollBar().maximum() == 0, [table.columnWidth(i) for i in range(table.columnCount())]
    cells = [table.item(r, TEXT_THERE) for r in range(table.rowCount())]
    whole = [c for c in cells if c.text().startswith("6 files changed")]
    assert whole and whole[0].text() == "6 files changed, 41 insertions(+), 3 deletions(-)\\n"
    assert whole[0].toolTip().endswith(": 6 files changed, 41 insertions(+), 3 deletions(-)\\n")
    assert whole[0].toolTip().startswith("the prompt from token ")
