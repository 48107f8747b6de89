"""The slots panel: a row per context (the main context and each batch slot) and live plots of each
one's prefill and decode speed in tokens per second. Each context's name in the table is in its curves' colour:
the plots' key where their legends would cover the curves and are hidden (a narrow window: at 640 px a plot is
~105 px wide, and its five rows of legend took 58 % of its height).

Presentation only: takes a `MonitorView`, keeps one curve per slot and updates it in place.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QHBoxLayout, QWidget
from strata.monitor import units
from strata.monitor.model import MonitorView, SlotRow
from strata.monitor.widgets.common import (
    Table,
    fit_legend,
    legend_where_it_fits,
    panel,
    plot_window,
    set_window,
    set_y_top,
    time_plot,
    xy,
)
from strata.monitor.widgets.theme import Theme

HEADERS = ("context", "group", "state", "held\ntok (filled)", "conversation", "last\nuse", "reused\ntok",
           "prefill\ntok/s", "decode\ntok/s", "protected\nfor", "value")
TIPS = ("", "slot group (unit of load)", "empty / idle / prefill / decode", "tokens the context's KV holds (share of its capacity)", "the conversation the context holds", "time since the context's last use ended (now: in use)",
        "prompt tokens the last request reused in this context", "last measured prefill speed",
        "last measured decode speed", "time left before the slot policy may give this slot to another "
        "conversation (expired: it may now; an empty slot or one in use has none)", "the slot policy's value of keeping this history (higher = kept longer); superseded: a copy whose "
        "conversation went on in another context, worth nothing")


BUSY = ("prefill", "decode")
SUPERSEDED = "superseded"


def slot_cells(row: SlotRow, live: bool = True) -> list[str]:
    """The row's cells; `live`: of a feed that flows now. Without one (the server stopping, restarting or down,
    the feed lost) what a context does now and how long ago it was used are not known: they read as the header's
    running and queued do, an en dash (a stopped server's slot read `decode`, last use `now`, while it parked its
    conversations and after); what it holds stays as last seen."""
    held = f"{units.count(row.tokens)} ({units.percent(row.tokens, row.capacity)})"
    # a context reading or writing is in use now; its last_use is when the previous use ended
    last_use = units.NA if not live else "now" if row.state in BUSY else units.ago(row.idle_s)
    return [row.label, "" if row.group is None else str(row.group), row.state if live else units.NA, held,
            row.conversation or units.NA, last_use,
            units.count(row.reused_tokens), units.rate(row.prefill_tps), units.rate(row.decode_tps),
            _protection(row.protection_left_s),
            # worth nothing, where its value and protection are not sent: it read as an en dash, as an empty slot
            # or one in use does, beside the tokens it holds (since 44c431d every copy a conversation left behind)
            SUPERSEDED if row.superseded else units.score(row.value)]


def _protection(left_s: float | None) -> str:
    """Protection left; none left reads `expired`, the policy's own word for such a history (the `expired`
    reason in the decisions tab), where it read `0 ms` (a new-user trial): a protection that had ended."""
    if left_s is not None and left_s <= 0:
        return "expired"
    return units.seconds(left_s)


class SlotsPanel(QWidget):
    def __init__(self, theme: Theme) -> None:
        super().__init__()
        self.theme = theme
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        box, layout = panel("Slots")
        self.table = Table(HEADERS, tooltips=TIPS)
        layout.addWidget(self.table)
        plots = QHBoxLayout()
        self.prefill_plot = time_plot("Prefill speed", "prefill", "tok/s", theme,
                                      "Prompt tokens read per second, a line per context (main and each slot) in the "
                                      "colour of its name in the table; 0 while the context is idle or decoding")
        self.decode_plot = time_plot("Decode speed", "decode", "tok/s", theme,
                                     "Tokens generated per second, a line per context (main and each slot) in the "
                                     "colour of its name in the table; 0 while the context is idle or reading a "
                                     "prompt")
        plots.addWidget(self.prefill_plot)
        plots.addWidget(self.decode_plot)
        for plot in (self.prefill_plot, self.decode_plot):
            # after time_plot's own fit_plot (connected first): the legend's columns are laid out for the new size
            item = plot.getPlotItem()
            item.getViewBox().sigResized.connect(lambda *_, item=item: legend_where_it_fits(item))
        layout.addLayout(plots, 1)
        outer.addWidget(box)
        self._curves: dict[tuple[str, str], pg.PlotDataItem] = {}
        self.key_colors: dict[str, str] = {}    # a context's curves' colour (its name's in the table), by key
        self.key_styles: dict[str, Qt.PenStyle] = {}   # and its line (Theme.line_style: colours repeat after 8)

    def refresh(self, view: MonitorView) -> None:
        busy = {"prefill": self.theme.warn, "decode": self.theme.good}
        live = view.connection == "connected"     # as the header's running and queued (header.totals_text)
        rows = [slot_cells(r, live) for r in view.slots]
        for key in sorted({r.key for r in view.slots} - set(self.key_colors), key=_slot_order):
            self._take_look(key)
        colors = [[self.key_colors[r.key], None, busy.get(r.state) if live else None] + [None] * 8
                  for r in view.slots]
        self.table.show_rows(rows, colors, align_right=(3, 5, 6, 7, 8, 9, 10))
        self.table.fit_height(len(rows))
        self._show_line_samples(view.slots)
        one_group = len({r.group for r in view.slots if r.group is not None}) <= 1
        if self.table.isColumnHidden(1) != one_group:
            self.table.setColumnHidden(1, one_group)
        labels = {r.key: r.label for r in view.slots}
        window = plot_window(view)
        for kind, plot, history in (("prefill", self.prefill_plot, view.prefill_history),
                                    ("decode", self.decode_plot, view.decode_history)):
            set_window(plot, window)
            top = 0.0
            for key in sorted(history, key=_slot_order):
                curve = self._curves.get((kind, key))
                if curve is None:
                    if key not in self.key_colors:
                        self._take_look(key)
                    pen = pg.mkPen(self.key_colors[key], width=2, style=self.key_styles[key])
                    curve = plot.plot([], [], pen=pen, name=labels.get(key, key), stepMode=None)
                    self._curves[(kind, key)] = curve
                    fit_legend(plot.getPlotItem())
                    legend_where_it_fits(plot.getPlotItem())
                xs, ys = xy(history[key], view.x_now, view.gaps)
                curve.setData(xs, ys)
                top = max([top, *ys])
            set_y_top(plot, top, minimum=10.0)

    def _take_look(self, key: str) -> None:
        """A colour and line each, in the order contexts are first seen, kept while the context lives."""
        i = len(self.key_colors)
        self.key_colors[key], self.key_styles[key] = self.theme.color(i), self.theme.line_style(i)

    def _show_line_samples(self, slots) -> None:
        """Where some contexts' lines are not solid (more contexts than colours), each name in the table has a
        sample of its curves' line beside it: the colour alone no longer tells main from slot 8. Drawn once a
        row's context changes, not at every redraw."""
        samples = any(self.key_styles.get(r.key, Qt.PenStyle.SolidLine) != Qt.PenStyle.SolidLine for r in slots)
        for n, r in enumerate(slots):
            item = self.table.item(n, 0)
            look = (self.key_colors[r.key], self.key_styles[r.key]) if samples else None
            if item is None or item.data(SAMPLE_ROLE) == look:
                continue
            item.setData(SAMPLE_ROLE, look)
            item.setIcon(line_sample(*look, self.table.devicePixelRatioF()) if look else QIcon())


SAMPLE_ROLE = Qt.ItemDataRole.UserRole + 1     # the (colour, line) a context cell's sample shows
SAMPLE_PX = (22, 10)                           # a sample's width and height (logical pixels): a dash and a half


def line_sample(color: str, style: Qt.PenStyle, ratio: float) -> QIcon:
    """An icon of a curve's line: its colour and its dashes, as the plots draw it (2 px)."""
    w, h = SAMPLE_PX
    pixmap = QPixmap(round(w * ratio), round(h * ratio))
    pixmap.setDevicePixelRatio(ratio)
    pixmap.fill(Qt.GlobalColor.transparent)
    p = QPainter(pixmap)
    pen = QPen(QColor(color), 2, style)
    pen.setCapStyle(Qt.PenCapStyle.FlatCap)
    p.setPen(pen)
    p.drawLine(QPointF(1, h / 2), QPointF(w - 1, h / 2))
    p.end()
    return QIcon(pixmap)


def _slot_order(key: str) -> tuple[int, int]:
    return (0, 0) if key == "main" else (1, int(key) if key.isdigit() else 0)
