"""Building blocks shared by the monitor's widgets: a titled panel, a table that updates only the
cells that changed (so nothing flickers), and a time plot in the window's theme.

Presentation only; the data comes from `strata.monitor.model.MonitorView`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QGraphicsItem,
    QGroupBox,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)
from strata.monitor.widgets.theme import Theme

pg.setConfigOptions(antialias=True)

PLOT_WINDOW_S = 120.0   # seconds of history the live plots show at most
MIN_WINDOW_S = 30.0     # and at least (a fresh monitor's short history is not squeezed into one edge)


class FittedBox(QGroupBox):
    """A panel's box whose least height is its height for its width (its wrapped lines, its plots' preferred
    height), telling its layout no height-for-width. A vertical box layout lays out an item that has one at that
    height, never less (QBoxLayout::setGeometry), while a panel's least height (panels_area.least_height) counted
    its least: the cache panel at 307 px took 713 px where its boxes said 765, and the layout squeezed the largest
    two alike, its levels box 240 px where it needs 259 (the saved-sessions line's last words cut off). Counted at
    their least instead, its plots came out at 140 px, the RAM plot's title and axis cut off at 640 px."""

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt's name
        return False

    def minimumSizeHint(self):  # noqa: N802 - Qt's name
        hint = super().minimumSizeHint()
        layout = self.layout()
        if layout is not None and self.width() > 0 and layout.hasHeightForWidth():
            hint.setHeight(max(hint.height(), layout.totalHeightForWidth(self.width())))
        return hint

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():   # its wrapped lines, so its least height, follow it
            self.updateGeometry()


def panel(title: str, *, fitted: bool = False) -> tuple[QGroupBox, QVBoxLayout]:
    """`fitted`: a FittedBox (its least height its height for its width: never squeezed below its lines)."""
    box = (FittedBox if fitted else QGroupBox)(title)
    f = box.font()
    f.setBold(True)
    box.setFont(f)
    layout = QVBoxLayout(box)
    layout.setContentsMargins(8, 6, 8, 6)
    layout.setSpacing(4)
    return box, layout


def plain(widget):
    """Child widgets of a bold group box get the normal font back."""
    f = widget.font()
    f.setBold(False)
    widget.setFont(f)
    return widget


def label(text: str = "", *, selectable: bool = False, wrap: bool = False, muted: bool = False) -> QLabel:
    lab = plain(QLabel(text))
    lab.setWordWrap(wrap)
    if selectable:
        lab.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    if muted:
        lab.setObjectName("muted")
    return lab


def set_text(lab: QLabel, text: str) -> None:
    if lab.text() != text:
        lab.setText(text)


class Table(QTableWidget):
    """A read-only table; `show_rows` writes only the cells whose text or colour changed."""

    def __init__(self, headers: Sequence[str], *, stretch: int | None = None, tooltips: Sequence[str] = (),
                 stretch_min_chars: int = 0) -> None:
        """`stretch`: the column that takes the width the others leave; with `stretch_min_chars`, never less than
        that many characters (the table scrolls sideways instead: Qt's stretch left the requests table's excerpt
        ~18 px, '6\u2026', at a 1280-px window)."""
        super().__init__(0, len(headers))
        self._stretch, self._stretch_min_chars = stretch, stretch_min_chars
        plain(self)
        self.setHorizontalHeaderLabels(list(headers))
        for i, tip in enumerate(tooltips):
            if tip:
                self.horizontalHeaderItem(i).setToolTip(tip)
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        if stretch is not None and stretch_min_chars:
            header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Fixed)   # sized in _fit_stretch
            header.sectionResized.connect(self._other_resized)
        elif stretch is not None:
            header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
        else:
            header.setStretchLastSection(True)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)

    def stretch_min_px(self) -> int:
        return self.fontMetrics().averageCharWidth() * self._stretch_min_chars + 8   # + the cell's margins

    def _other_resized(self, index: int, _old: int, _new: int) -> None:
        if index != self._stretch:
            self._fit_stretch()

    def _fit_stretch(self) -> None:
        """The stretch column takes what the others leave of the viewport, at least `stretch_min_px`."""
        if self._stretch is None or not self._stretch_min_chars:
            return
        header = self.horizontalHeader()
        others = sum(header.sectionSize(i) for i in range(self.columnCount())
                     if i != self._stretch and not header.isSectionHidden(i))
        width = max(self.viewport().width() - others, self.stretch_min_px(),
                    header.sectionSizeFromContents(self._stretch).width())
        if header.sectionSize(self._stretch) != width:
            header.resizeSection(self._stretch, width)

    def updateGeometries(self) -> None:
        """Qt's hook for a new viewport size (the window's, or a vertical scroll bar that came or went)."""
        self._fit_stretch()
        super().updateGeometries()   # after: it sets the scroll bars' ranges from the sections' widths

    def fit_height(self, n_rows: int) -> None:
        """Tall enough for `n_rows` rows (at least one), the header and a horizontal scroll bar."""
        h = (self.horizontalHeader().sizeHint().height() + self.verticalHeader().defaultSectionSize() * max(n_rows, 1)
             + self.horizontalScrollBar().sizeHint().height() + 2 * self.frameWidth() + 2)
        if self.maximumHeight() != h:
            self.setFixedHeight(h)

    def show_rows(self, rows: Sequence[Sequence[str]], colors: Sequence[Sequence[str | None]] | None = None,
                  align_right: Sequence[int] = (), tips: Sequence[Sequence[str | None]] | None = None) -> None:
        """`tips`: each cell's tooltip where it holds more than the cell shows (None: the cell's text)."""
        if self.rowCount() != len(rows):
            self.setRowCount(len(rows))
        # the model's signals held while the cells change, then one dataChanged over the changed ones: a signal per
        # cell cost the view ~0.04 ms each (200 cells a snapshot when a finished request shifts the rows down)
        model = self.model()
        was_blocked = model.blockSignals(True)
        try:
            changed = self._write_cells(rows, colors, align_right, tips)
        finally:
            model.blockSignals(was_blocked)
        if changed:
            rs, cs = [r for r, _ in changed], [c for _, c in changed]
            model.dataChanged.emit(model.index(min(rs), min(cs)), model.index(max(rs), max(cs)))

    def _write_cells(self, rows, colors, align_right, tips) -> list[tuple[int, int]]:
        """Writes the cells whose text, tooltip or colour differ; returns their (row, column)s."""
        changed = []
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                item = self.item(r, c)
                if item is None:
                    item = QTableWidgetItem()
                    if c in align_right:
                        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                    self.setItem(r, c, item)
                    changed.append((r, c))
                tip = (tips[r][c] if tips else None) or text
                if item.text() != text:
                    item.setText(text)
                    changed.append((r, c))
                if item.toolTip() != tip:
                    item.setToolTip(tip)
                color = colors[r][c] if colors else None
                current = item.data(Qt.ItemDataRole.UserRole)
                if color != current:
                    item.setData(Qt.ItemDataRole.UserRole, color)
                    if color:
                        item.setForeground(QColor(color))
                    else:
                        item.setData(Qt.ItemDataRole.ForegroundRole, None)
                    changed.append((r, c))
        return changed


AGES_AT_LOSS = "when, at\nthe loss"      # no wider than its ages: the admission table's last column kept its room


def say_where_ages_count_to(table: Table, column: int, lost: bool) -> None:
    """A `when` column's header. Its ages count to the latest snapshot: now while the feed flows; while it is lost
    they stay as they were at the loss (nothing new is drawn), and the header says so: 13 s after the server was
    killed its last request still read `312 ms ago` under a bare `when` (session 40's trial)."""
    text = AGES_AT_LOSS if lost else "when"     # MonitorView.feed_lost
    item = table.horizontalHeaderItem(column)
    if item is not None and item.text() != text:
        item.setText(text)


class Bar(QWidget):
    """A thin horizontal bar (value of maximum) that repaints lazily; QProgressBar repaints at once on
    every change, which measured 11 ms a call offscreen."""

    def __init__(self, height: int = 10) -> None:
        super().__init__()
        self.setFixedHeight(height)
        self.value, self.maximum = 0.0, 1.0

    def set(self, value: float, maximum: float) -> None:
        if (value, maximum) != (self.value, self.maximum):
            self.value, self.maximum = value, maximum
            self.update()

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        r = self.rect().adjusted(0, 0, -1, -1)
        p.setPen(pal.color(QPalette.ColorRole.Mid))
        p.setBrush(pal.color(QPalette.ColorRole.Base))
        p.drawRoundedRect(r, 3, 3)
        share = 0.0 if self.maximum <= 0 else max(0.0, min(1.0, self.value / self.maximum))
        if share > 0:
            p.setPen(Qt.PenStyle.NoPen)
            p.setBrush(pal.color(QPalette.ColorRole.Highlight))
            p.drawRoundedRect(QRectF(r.x() + 1, r.y() + 1, max(2.0, (r.width() - 1) * share), r.height() - 1), 2, 2)
        p.end()


def time_plot(title: str, y_label: str, y_units: str, theme: Theme, tip: str) -> pg.PlotWidget:
    """A live plot: x is seconds before now (the last snapshot), y has its unit on the axis; `tip` says what
    its lines are (the title is short, to fit a narrow window)."""
    w = pg.PlotWidget()
    w.setToolTip(tip)
    style_plot(w, theme)
    item = w.getPlotItem()
    item.setTitle(title, size="10pt", color=theme.foreground)
    item.setLabel("left", y_label, units=y_units)
    item.setLabel("bottom", "time", units="s")
    item.getAxis("left").enableAutoSIPrefix(bool(y_units))   # counts and GiB stay as they are
    item.getAxis("bottom").enableAutoSIPrefix(False)
    for name in ("left", "bottom"):
        # kept as a pixmap until the axis changes: its grid spans the plot, so each new curve point replayed
        # both axes' pictures (ticks, texts, grid; ~1.9 ms an axis, 8 axes a redraw)
        item.getAxis(name).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
    item.showGrid(x=True, y=True, alpha=theme.grid_alpha)
    item.setXRange(-PLOT_WINDOW_S, 0, padding=0)
    item.setMouseEnabled(x=False, y=False)
    item.hideButtons()
    item.setMenuEnabled(False)
    legend = item.addLegend(offset=(6, LEGEND_TOP), labelTextColor=theme.foreground, labelTextSize="8pt",
                            brush=pg.mkBrush(theme.background + "c0"), horSpacing=12)
    legend.layout.setContentsMargins(3, 2, 3, 2)   # rows close to the frame: more of them fit a small plot
    item.getViewBox().sigResized.connect(lambda *_: fit_plot(w))
    w.setMinimumHeight(140)
    return w


def fit_plot(w: pg.PlotWidget) -> None:
    """The legend fitted to the plot, and the widget no narrower than the plot needs: its title and axes set
    a least width the widget did not know, so a narrow window cut the plot's right part off (the parks plot's
    'disk' legend entry and last tick at 800 px)."""
    item = w.getPlotItem()
    fit_legend(item)
    if hasattr(w, "y_asked"):       # the legend's strip may be taller or shorter now: the headroom follows it
        set_y_top(w, *w.y_asked)
    least = math.ceil(item.minimumWidth()) + 2 * w.frameWidth()
    if w.minimumWidth() != least:
        w.setMinimumWidth(least)


LEGEND_TOP = 4   # px between the plot's top and its legend


def fit_legend(item: pg.PlotItem) -> None:
    """Lays a legend out in as many columns as the plot's width allows, so that it is a strip along the plot's top
    as few rows high as can be; set_y_top keeps the curves below it where it takes at most LEGEND_MAX_SHARE (in one
    column, five contexts' entries covered the speed plots' left half at 800 px, a new-user trial). Call it again
    when entries are added; the plot's resizes call it by themselves."""
    legend = item.legend
    if legend is None or not legend.items:
        return
    width = item.getViewBox().width() - 6
    columns = 1
    for n in range(2, len(legend.items) + 1):
        legend.setColumnCount(n)
        if legend.layout.effectiveSizeHint(Qt.SizeHint.PreferredSize).width() > width:
            break
        columns = n
    legend.setColumnCount(columns)


# the most of a plot's height the legend's strip may keep free of curves: a legend taller than that (a plot a few
# rows high, the parks plot beside the hit counts, the speed plots at 640 px) is hidden (legend_where_it_fits), the
# key given elsewhere, rather than squash the curves into the rest (at 0.6, the parks plot's curves took its lowest
# quarter, under the legend still) or lie over them
LEGEND_MAX_SHARE = 0.5


def legend_share(item: pg.PlotItem) -> float:
    """The share of the plot's height from its top to the legend's bottom (0 without a legend)."""
    legend, box = item.legend, item.getViewBox()
    if legend is None or not legend.items or box.height() <= 0:
        return 0.0
    height = legend.layout.effectiveSizeHint(Qt.SizeHint.PreferredSize).height()
    return (LEGEND_TOP + height + 2) / box.height()


def legend_where_it_fits(item: pg.PlotItem) -> bool:
    """Shows the plot's legend where its strip fits above the curves (legend_share <= LEGEND_MAX_SHARE) and hides it
    where it would cover them (set_y_top keeps no headroom for a legend that tall); whether it is shown. The caller
    gives the key elsewhere then: the names in their curves' colours."""
    fits = legend_share(item) <= LEGEND_MAX_SHARE
    if item.legend is not None and item.legend.isVisible() != fits:
        item.legend.setVisible(fits)
    return fits


def headroom_share(item: pg.PlotItem) -> float:
    """The share of the plot's height kept above the curves for the legend: its share, or none past the most."""
    share = legend_share(item)
    return share if share <= LEGEND_MAX_SHARE else 0.0


def style_plot(w: pg.PlotWidget, theme: Theme) -> None:
    w.setBackground(theme.background)
    item = w.getPlotItem()
    for name in ("left", "bottom"):
        axis = item.getAxis(name)
        axis.setPen(pg.mkPen(theme.foreground))
        axis.setTextPen(pg.mkPen(theme.foreground))
        f = QFont(axis.font() if hasattr(axis, "font") else QFont())
        f.setPointSizeF(8.5)
        axis.setStyle(tickFont=f)


def plot_window(view) -> float:
    """Seconds the time plots show: the history held rounded up to 15 s, between MIN_WINDOW_S and
    PLOT_WINDOW_S (in steps, so that the time axis changes only now and then)."""
    span = math.ceil(view.history_span / 15.0) * 15.0
    return min(PLOT_WINDOW_S, max(MIN_WINDOW_S, span))


def nice_ceil(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is >= x (x > 0)."""
    exp = math.floor(math.log10(x))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if step * 10 ** exp >= x:
            return step * 10 ** exp
    return 10 ** (exp + 1)


def set_window(plot: pg.PlotWidget, seconds: float) -> None:
    item = plot.getPlotItem()
    lo, hi = item.getViewBox().viewRange()[0]
    if abs(lo + seconds) > 0.5 or hi != 0:
        item.setXRange(-seconds, 0, padding=0)


def set_y_top(plot: pg.PlotWidget, ys_top: float, minimum: float) -> None:
    """y from 0 to a little above the highest value (at least `minimum`) and the legend's strip above that:
    counts and speeds are never negative, an idle flat line stays at the bottom instead of being centred on a
    +-0.4 axis, and no curve runs under the legend."""
    plot.y_asked = (ys_top, minimum)      # for fit_plot, at a resize
    item = plot.getPlotItem()
    # a few steps only: the axis is not redrawn every time
    top = nice_ceil(max(ys_top * 1.12, minimum) / (1.0 - headroom_share(item)))
    lo, hi = item.getViewBox().viewRange()[1]
    if lo != 0 or abs(hi - top) > 1e-9 * max(top, 1):
        item.setYRange(0, top, padding=0)


def xy(points: Sequence[tuple[float, float]], now: float,
       gaps: Sequence[float] = ()) -> tuple[list[float], list[float]]:
    """Series points as (seconds before now, value) lists, only those inside the plot window; a NaN value after
    the last point before each of `gaps` (MonitorView.gaps: the feed lost), where pyqtgraph breaks the line (it drew
    one straight across the time nothing was known)."""
    xs, ys = [], []
    breaks = iter(sorted(gaps))
    gap = next(breaks, None)
    for t, v in points:
        while gap is not None and t > gap:
            if xs:
                xs.append(gap - now)
                ys.append(math.nan)
            gap = next(breaks, None)
        if t >= now - PLOT_WINDOW_S - 1:
            xs.append(t - now)
            ys.append(v)
    return xs, ys
