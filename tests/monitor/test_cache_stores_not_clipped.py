"""The cache panel's stores (system-prompt cache, segments, the saved-sessions folder) are drawn whole: review of
e44cae5, whose saved-sessions line, wrapped, took the label past the height its layout gave it, at the window's
default size and at 640x440 ('... 3 evicted, 2' with 'refused' cut off below). A box layout lays out its boxes
whose height follows their width at that height, never less, and the panel's least height counted them at their
least (panels_area.least_height: 713 px where they take 765), so the layout squeezed them, the levels box 240 px
where it needs 259. The panel's boxes are common.FittedBox now. A shown window on the recorded feed with a full
sessions folder; looked at as PNGs at the default size and 640x440 too."""

from __future__ import annotations

import pytest
from strata.monitor.window import MonitorWindow

from tests.fixtures.qt import settle
from tests.monitor.test_sessions_folder_shown import _model

FULL = {"folder": "/home/me/.cache/strata/sessions", "budget_mib": 2048, "used_mib": 1900.5, "when_full": "evict",
        "evictions": 3, "refusals": 2, "entries": 7, "skipped": {"damaged": 1}, "removed": {}}


@pytest.mark.parametrize("size", [None, (640, 440), (1024, 640), (1280, 800)])
def test_the_stores_label_gets_the_height_its_lines_need(qtbot, size):
    w = MonitorWindow(_model(FULL), theme="light")
    qtbot.addWidget(w)
    if size:
        w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    w.redraw()
    settle(qtbot, w)
    lab = w.cache.system_prompt
    box, panel = lab.parentWidget(), w.cache
    assert "refused" in lab.text()
    # before: 100 px where its lines need 112, at the default size and at 640x440
    assert lab.height() >= lab.heightForWidth(lab.width()), (w.size().toTuple(), lab.width(), lab.height())
    # and inside its box, the box inside the panel (before: the box 240 px where it needs 259, the label's foot past
    # it), the panel no shorter than its boxes
    assert lab.geometry().bottom() < box.height() - box.layout().contentsMargins().bottom() + 1, \
        (w.size().toTuple(), lab.geometry().getRect(), box.height())
    assert box.height() >= box.heightForWidth(box.width()), (w.size().toTuple(), box.height())
    assert box.geometry().bottom() < panel.height(), (box.geometry().getRect(), panel.height())
