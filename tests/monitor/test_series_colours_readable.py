"""Every context's colour can be read where it is drawn: its name in the slots table (on the table's rows, plain and
alternate) and its curves (on the plot's background), at least 3:1 (WCAG 2.1 non-text contrast, 1.4.11; the
names are the plots' key). Session 40's trial, `strata serve --batch 16`: the light theme's Okabe-Ito yellow
(#F0E442, 1.3:1 on white) made `slot 7` and `slot 15` near invisible, its orange and sky blue (2.3:1) `slot 4`,
`slot 5`, `slot 12`, `slot 13` faint. Real Qt (offscreen), the recorded feed of a real server with 16 slots."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QPalette

from tests.fixtures.qt import settle, shown_window
from tests.monitor.test_many_contexts_told_apart import contexts

LEAST = 3.0


def luminance(c: QColor) -> float:
    def linear(x: float) -> float:
        return x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4

    return 0.2126 * linear(c.redF()) + 0.7152 * linear(c.greenF()) + 0.0722 * linear(c.blueF())


def contrast(a: QColor, b: QColor) -> float:
    lo, hi = sorted((luminance(a), luminance(b)))
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_every_context_colour_reads_on_its_background(qtbot, theme):
    w = shown_window(qtbot, contexts(16), (1280, 800), theme=theme)
    w.redraw(force=True)
    settle(qtbot, w)
    table = w.slots.table
    grounds = {role.name: table.palette().color(role) for role in (QPalette.ColorRole.Base,
                                                                   QPalette.ColorRole.AlternateBase)}
    grounds["plot"] = QColor(w.theme.background)
    faint = []
    for r in range(table.rowCount()):
        item = table.item(r, 0)
        colour = item.foreground().color()
        for where, ground in grounds.items():
            ratio = contrast(colour, ground)
            if ratio < LEAST:
                faint.append((item.text(), colour.name(), where, round(ratio, 2)))
    assert not faint, faint
