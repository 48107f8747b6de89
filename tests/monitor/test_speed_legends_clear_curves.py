"""No speed plot's legend covers its curves, whatever the window's size. At 640 px a speed plot is ~105 px wide and
its legend one column of five rows, 58 % of its height: taller than LEGEND_MAX_SHARE, so the y axis kept no room
for it and it lay over the curves (a steady speed ran under it). Such a legend is hidden now, and each context's
name in the slots table is in its curves' colour: the key. Real Qt (offscreen), the recorded feed with five
contexts; the curves are then set to a steady speed across the whole window, as the panel draws one."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF
from strata.monitor.widgets.common import LEGEND_MAX_SHARE, legend_share, set_y_top

from tests.fixtures.qt import settle, shown_window
from tests.monitor.test_small_windows import five_contexts

PEAK = 100 / 1.12    # the axis's top is chosen from the highest point: a line near it runs along the plot's top


@pytest.mark.parametrize("size", [(640, 440), (640, 800), (1024, 640), (1280, 800)])
def test_no_speed_legend_covers_a_curve_and_the_table_gives_the_key(qtbot, size, artifacts):
    w = shown_window(qtbot, five_contexts(), size)
    for _ in range(2):      # the y axis is chosen at a redraw, for the legend of the last layout: as the timer does
        w.redraw()
        settle(qtbot, w)
    for plot in (w.slots.prefill_plot, w.slots.decode_plot):
        item = plot.getPlotItem()
        box = item.getViewBox()
        lo, hi = box.viewRange()[0]
        xs = [lo + (hi - lo) * i / 100 for i in range(101)]
        curves = item.listDataItems()
        assert len(curves) == 5
        for curve in curves:
            curve.setData(xs, [PEAK] * len(xs))
        set_y_top(plot, PEAK, minimum=10.0)
        settle(qtbot, w)
        if item.legend.isVisible():
            legend = item.legend.sceneBoundingRect()
            for curve in curves:
                for x, y in zip(*curve.getData(), strict=True):
                    point = box.mapViewToScene(QPointF(float(x), float(y)))
                    assert not legend.contains(point), (size, curve.name(), x, point, legend)
        share = legend_share(item)
        assert item.legend.isVisible() == (share <= LEGEND_MAX_SHARE), (size, share)
        if size[0] == 640:
            assert not item.legend.isVisible(), (size, share)      # before: shown (share 0.58), over them
    # the key: each context's name in its curves' colour (the prefill and decode curves of a context share it)
    pens = {c.name(): c.opts["pen"].color().name() for c in w.slots.prefill_plot.getPlotItem().listDataItems()}
    table = w.slots.table
    names = {table.item(r, 0).text(): table.item(r, 0).foreground().color().name() for r in range(table.rowCount())}
    assert names == pens, (names, pens)
    assert len(set(pens.values())) == 5
    assert w.grab().save(str(artifacts / f"speed-legends-{size[0]}x{size[1]}.png"))

