"""The plan page at the wizard's least size (640x440) is readable: the reasons' column keeps WHY_LEAST_SHARE of the
table, a long key wraps at its underscores, and every cell's text fits its cell. Before, the setting column (as
wide as "conversation_cache_park_min_free_mib") and the value column (200 px) took 446 of the table's 572 px: the
reasons wrapped a word or two a line in 126 px, the model's row 113 px and the cold folder's 141 px tall of the
table's ~215, so two settings were in sight at once (session 30's review: the "why" column too narrow, text cut).

Real Qt (offscreen), the real wizard on this machine's plan."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QRect, Qt  # noqa: E402
from PySide6.QtGui import QFontMetrics  # noqa: E402
from PySide6.QtWidgets import QStyle  # noqa: E402
from strata.installer.wizard.plan_page import BREAK, WHY_LEAST_SHARE, column_widths  # noqa: E402
from strata.installer.wizard.setup_wizard import LEAST_SIZE  # noqa: E402

from tests.installer.conftest import wizard_at_plan_page  # noqa: E402


@pytest.mark.parametrize(("width", "setting", "value", "expect"), [
    (572, 246, 190, (171, 143)),      # the least size: the key column capped, the value column what is left
    (832, 246, 184, (246, 184)),      # 900x600: each what it needs, as before
    (832, 246, 400, (246, 200)),      # a long path: the value column at most 200 px
    (100, 246, 190, (30, 25)),        # narrower than any window: the reasons still get their share
])
def test_column_widths(width, setting, value, expect):
    got = column_widths(width, setting, value)
    assert got == expect and width - sum(got) >= WHY_LEAST_SHARE * width


def _plan_at_least_size(qtbot, tmp_path):
    wizard = wizard_at_plan_page(qtbot, tmp_path)
    assert wizard.currentId() == wizard.page_ids["plan"]
    wizard.resize(*LEAST_SIZE)
    return wizard, wizard.currentPage().table


def test_the_plan_at_640x440_has_room_for_its_reasons_and_every_cell_fits(qtbot, tmp_path):
    wizard, table = _plan_at_least_size(qtbot, tmp_path)
    view = table.viewport()
    qtbot.waitUntil(lambda: view.width() < 600 and table.columnWidth(2) >= WHY_LEAST_SHARE * view.width(),
                    timeout=5000)   # before: 126 of 572 px
    qtbot.waitUntil(lambda: all(table.rowHeight(r) >= table.sizeHintForRow(r) for r in range(table.rowCount())),
                    timeout=5000)
    fm = QFontMetrics(table.font())
    margin = table.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin, None, table) + 1
    cut = []
    for r in range(table.rowCount()):
        for c in range(3):
            item = table.item(r, c)
            room = QRect(0, 0, table.columnWidth(c) - 2 * margin, 10_000)
            needs = fm.boundingRect(room, int(Qt.TextFlag.TextWordWrap), item.text())
            wide = needs.width() > room.width() and c != 1   # a value's too-long line: elided, whole in the tooltip
            if wide or needs.height() > table.rowHeight(r):
                cut.append((item.toolTip(), needs.width(), room.width(), needs.height(), table.rowHeight(r)))
            assert item.toolTip().replace("_", BREAK) == item.text() if c == 0 else item.toolTip() == item.text()
    assert cut == [] and table.textElideMode() == Qt.TextElideMode.ElideMiddle
    # several settings in sight at once, and no row taller than the table (scrolled a row at a time, it could
    # not be seen whole): before, 2 rows in sight, the tallest 141 px of ~215
    in_sight, bottom = 0, 0
    for r in range(table.rowCount()):
        assert table.rowHeight(r) < view.height() / 2, (table.item(r, 0).toolTip(), table.rowHeight(r))
        bottom += table.rowHeight(r)
        in_sight += bottom <= view.height()
    assert in_sight >= 4, (in_sight, view.height(), [table.rowHeight(r) for r in range(table.rowCount())])
