"""No curve runs under a plot's legend: at an 800-px window the speed plots' legends (a row per context, in one
column) covered their left half, the curves drawn behind them (a new-user trial's screenshots). The legend is now a
strip of as many columns as the plot's width takes, and the y axis leaves that strip above the highest point."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPointF
from strata.monitor.widgets.common import (
    LEGEND_MAX_SHARE,
    fit_legend,
    legend_share,
    set_window,
    set_y_top,
    time_plot,
)
from strata.monitor.widgets.theme import LIGHT

from tests.fixtures.qt import settle
from tests.monitor.test_small_windows import five_contexts


def speed_plot(qtbot, size: tuple[int, int], n_lines: int, peak: float):
    """A speed plot as the slots panel makes it, a line per context, each at `peak` across the whole window
    (the highest a line reaches: the axis's top is chosen from it)."""
    w = time_plot("Prefill speed", "prefill", "tok/s", LIGHT, "speeds")
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    set_window(w, 60.0)
    xs = [-60.0 + i for i in range(61)]
    for i in range(n_lines):
        w.plot(xs, [peak] * len(xs), name="main" if i == 0 else f"slot {i}")
        fit_legend(w.getPlotItem())                  # as the slots panel does for each new line
    qtbot.wait(50)
    set_y_top(w, peak, minimum=10.0)
    qtbot.wait(50)
    return w, xs


@pytest.mark.parametrize(("size", "n_lines"), [((230, 270), 5), ((230, 270), 3), ((320, 300), 5), ((460, 200), 5)])
def test_no_curve_point_lies_under_the_legend(qtbot, size, n_lines):
    # 89.3 x 1.12 = 100: before, the axis's top was 100 and the lines ran at 89 % of the height, the legend over them
    w, xs = speed_plot(qtbot, size, n_lines, peak=100 / 1.12)
    item = w.getPlotItem()
    assert legend_share(item) <= LEGEND_MAX_SHARE, legend_share(item)    # a plot the legend fits above the curves
    box = item.getViewBox()
    legend = item.legend.sceneBoundingRect()
    assert box.sceneBoundingRect().contains(legend)
    for x in xs:
        point = box.mapViewToScene(QPointF(x, 100 / 1.12))
        assert not legend.contains(point), (x, point, legend)
        assert point.y() > legend.bottom()


@pytest.mark.parametrize("size", [(800, 760), (640, 440), (1280, 800)])
def test_the_speed_plots_legends_are_strips_above_their_curves(qtbot, size):
    """In the window, each speed plot's legend is as few rows as its width allows, and its top is above the
    highest point of its curves."""
    from tests.fixtures.qt import shown_window
    w = shown_window(qtbot, five_contexts(), size)
    for _ in range(2):      # the y axis is chosen at a redraw, for the legend of the last layout: as the timer does
        w.redraw()
        settle(qtbot, w)
    for plot in (w.slots.prefill_plot, w.slots.decode_plot):
        item = plot.getPlotItem()
        legend, box = item.legend, item.getViewBox()
        assert legend.columnCount > 1 or box.width() < 180, (size, legend.columnCount, box.width())
        bottom = legend.sceneBoundingRect().bottom()
        for curve in item.listDataItems():
            _, ys = curve.getData()
            if ys is not None and len(ys) and legend_share(item) <= LEGEND_MAX_SHARE:
                top = box.mapViewToScene(QPointF(0, float(max(ys)))).y()
                assert top > bottom, (size, curve.name(), top, bottom)


@pytest.mark.parametrize(("size", "shown"), [((800, 760), False), ((1400, 900), True)])
def test_the_parks_plot_shows_its_legend_only_where_it_clears_the_curves(qtbot, size, shown):
    """The parks plot is a few rows high beside the hit counts: at 800 px its legend's three rows took the whole
    plot. Where it cannot sit above the curves it is hidden, and the summary's destination names, in their
    curves' colours, are the key."""
    from strata.monitor.widgets.cache import PARK_NAMES
    from strata.monitor.widgets.theme import PARK_COLORS

    from tests.fixtures.qt import shown_window
    w = shown_window(qtbot, five_contexts(), size)
    for _ in range(2):
        w.redraw()
        settle(qtbot, w)
    item = w.cache.parks_plot.getPlotItem()
    assert item.legend.isVisible() == shown, (size, legend_share(item))
    if shown:
        assert legend_share(item) <= LEGEND_MAX_SHARE
    summary = w.cache.summary.text()
    for d, name in PARK_NAMES.items():
        assert f"<span style='color:{LIGHT.color(PARK_COLORS[d])}'>{name}</span>" in summary, summary
