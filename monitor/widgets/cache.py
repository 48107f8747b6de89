"""The conversation cache panel: parking by destination over time, hits by level, the admission state
(available RAM, under a memory limit where one applies, against the parking floor and the transient floor, with the source of the last
decisions), the disk levels (folder, used against budget, entries, degradations, evictions), the
system-prompt cache, the segment tier and the saved-sessions folder.

Presentation only; the numbers are the feed's `cache` object (docs/internals.md "Monitor feed").
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QVBoxLayout, QWidget
from strata.monitor import units
from strata.monitor.label_layout import POINTER, Box, place_labels
from strata.monitor.model import HIT_LEVELS, PARK_DESTINATIONS, MonitorView
from strata.monitor.widgets.common import (
    Bar,
    Table,
    label,
    legend_where_it_fits,
    panel,
    plot_window,
    say_where_ages_count_to,
    set_text,
    set_window,
    set_y_top,
    time_plot,
    xy,
)
from strata.monitor.widgets.theme import PARK_COLORS, Theme

LEVEL_HEADERS = ("level", "state", "folder", "used /\nbudget", "entries", "de-\ngraded", "evicted", "aged\nout")
LEVEL_TIPS = ("", "on / off", "", "bytes held against the level's budget",
              "conversations held (and files found at start-up and not trusted: damaged, partial, orphaned, "
              "an older Strata's; skipped: left on disk; removed: Strata's own, damaged, orphaned or an older "
              "Strata's; the log names them)",
              "entries handed down to the next level (budget or age)", "entries deleted for the budget",
              "entries deleted for their age")
PARK_NAMES = {"ram": "RAM", "disk": "disk", "discard": "discarded"}
DECISION_HEADERS = ("when", "decision\n(source)", "floor,\nneeds")
# the decision column keeps its text whole; the floor column takes what is left, its text elided (the cell's tooltip
# holds it) down to this many characters, then the table scrolls sideways. The decision column was the stretch one:
# a new-user trial's 1024x640 window showed it 26 px wide ("ra…", "re…") and 1280x800 "restore (disk_…"
FLOOR_MIN_CHARS = 7   # "parking", the longer floor's name
LINE_STYLES = {"min_free_mib": "dashed", "park_min_free_mib": "dotted"}
HIT_NAMES = {"ram": "RAM", "warm": "warm", "cold": "cold", "segment": "segment", "system_prompt": "system prompt"}


def level_cells(level: dict) -> list[str]:
    on = level.get("state") in ("on", "read-only")   # read-only: its entries are there and read, nothing new kept
    used, budget = level.get("used_mib"), level.get("budget_mib")
    used_text = f"{units.mib(used)} / {units.mib(budget)}" if on else units.NA
    entries = units.count(level.get("entries")) + files_at_start_text(level)
    return [str(level.get("name", "?")), str(level.get("state", "?")), level.get("folder") or units.NA,
            used_text, entries, units.count(level.get("degradations")),
            units.count(level.get("evictions")), units.count(level.get("age_evictions"))]


def _total(counts) -> int:
    return sum(n for n in (counts if isinstance(counts, dict) else {}).values() if isinstance(n, int))


def files_at_start_text(level: dict) -> str:
    """` (1 skipped, 3 removed)`: the files found at start-up and not trusted (conversation-cache.md, "Files"; the
    feed's `skipped`), split into those left on disk and those removed (`removed`: Strata's own, damaged or
    orphaned); "" when none. The log names them. Split, not "4 skipped, 3 removed": shorter in a narrow
    column, and each file counted once."""
    removed = _total(level.get("removed"))
    kept = max(_total(level.get("skipped")) - removed, 0)
    parts = [f"{n} {what}" for n, what in ((kept, "skipped"), (removed, "removed")) if n]
    return f" ({', '.join(parts)})" if parts else ""


def decision_cells(d: dict, now: float) -> list[str]:
    t = d.get("time")
    floor = d.get("floor")
    admitted = str(floor) if floor else units.NA
    if d.get("need_mib") is not None:
        admitted += f", {units.mib(d.get('need_mib'))}"
    return [units.ago(now - t) if isinstance(t, (int, float)) else units.NA,
            f"{d.get('action', units.NA)} ({d.get('source', units.NA)})", admitted]


class CachePanel(QWidget):
    def __init__(self, theme: Theme) -> None:
        super().__init__()
        self.theme = theme
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)

        box, layout = panel("Conversation cache", fitted=True)
        self.summary = label(selectable=True, wrap=True)
        layout.addWidget(self.summary)
        plots = QHBoxLayout()
        self.parks_plot = time_plot("Parks (total)", "parks", "", theme,
                                    "Conversations parked since the server started, by where they went: the RAM "
                                    "level, disk (warm or cold level), or discarded (no room anywhere); each line in "
                                    "the colour of its name in the line above")
        self._park_curves = {}
        for d in PARK_DESTINATIONS:
            pen = pg.mkPen(theme.color(PARK_COLORS[d]), width=2)
            self._park_curves[d] = self.parks_plot.plot([], [], pen=pen, name=PARK_NAMES[d])
        self.parks_plot.getPlotItem().getViewBox().sigResized.connect(lambda *_: self._legend_or_names())
        hits_box = QWidget()
        hits_box.setToolTip("Prompts that reused a cached history, by the level it came from (since the server started)")
        hits = QGridLayout(hits_box)
        hits.setContentsMargins(4, 0, 0, 0)
        hits.addWidget(label("<b>Hits by level</b>"), 0, 0, 1, 3)
        self.hit_bars: dict[str, Bar] = {}
        self.hit_counts: dict[str, QLabel] = {}
        for row, key in enumerate(HIT_LEVELS, start=1):
            bar = Bar()
            self.hit_bars[key] = bar
            self.hit_counts[key] = label("0")
            self.hit_counts[key].setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            hits.addWidget(label(HIT_NAMES[key]), row, 0)
            hits.addWidget(bar, row, 1)
            hits.addWidget(self.hit_counts[key], row, 2)
        hits.setColumnStretch(1, 1)
        hits.setRowStretch(len(HIT_LEVELS) + 1, 1)
        plots.addWidget(self.parks_plot, 3)
        plots.addWidget(hits_box, 2)
        layout.addLayout(plots, 1)
        outer.addWidget(box, 3)

        adm_box, adm = panel("Admission (RAM)", fitted=True)
        self.admission = label(selectable=True, wrap=True)
        adm.addWidget(self.admission)
        row = QHBoxLayout()
        self.ram_plot = time_plot("Available RAM", "available (GiB)", "", theme,
                                  "The available RAM (the host's, or what a memory limit on the server "
                                  "leaves, the lesser) against its floors: a conversation parked in RAM "
                                  "leaves the parking floor (dashed) free; one on its way to disk may take RAM "
                                  "down to the transient floor (dotted)")
        self.ram_plot.getPlotItem().legend.setVisible(False)
        self._ram_curve = self.ram_plot.plot([], [], pen=pg.mkPen(theme.color(0), width=2))
        self._floor_lines = {}
        self._floor_labels: dict[str, tuple[pg.TextItem, str]] = {}
        # short names (the text above names each floor with its size and line style), placed by
        # label_layout beside their lines, clear of both lines and of each other, on every resize
        for key, name, style in (("min_free_mib", "parking", Qt.PenStyle.DashLine),
                                 ("park_min_free_mib", "transient", Qt.PenStyle.DotLine)):
            line = pg.InfiniteLine(angle=0, movable=False, pen=pg.mkPen(theme.warn, width=1.5, style=style))
            text = pg.TextItem(name, color=theme.warn)
            text.textItem.document().setDocumentMargin(1)   # the box is the text's: 4 px padding hid overlaps
            f = QFont(text.textItem.font())
            f.setPointSizeF(8.5)
            text.setFont(f)
            for item in (line, text):
                item.setVisible(False)
                self.ram_plot.addItem(item, ignoreBounds=True)
            self._floor_lines[key] = line
            self._floor_labels[key] = (text, name)
        view_box = self.ram_plot.getPlotItem().getViewBox()
        view_box.sigResized.connect(self._place_floor_labels)
        view_box.sigYRangeChanged.connect(self._place_floor_labels)
        row.addWidget(self.ram_plot, 1)
        self.decisions = Table(DECISION_HEADERS, stretch=2, stretch_min_chars=FLOOR_MIN_CHARS)
        self.decisions.setToolTip("The cache's latest admission decisions, newest first: what was done, which "
                                  "floor admitted it, the source (park, disk_hit, session...) and the RAM it needed")
        row.addWidget(self.decisions, 2)
        adm.addLayout(row, 1)
        outer.addWidget(adm_box, 3)

        lv_box, lv = panel("Levels and system-prompt cache", fitted=True)
        self.levels = Table(LEVEL_HEADERS, stretch=2, tooltips=LEVEL_TIPS)
        lv.addWidget(self.levels)
        self.system_prompt = label(selectable=True, wrap=True)
        lv.addWidget(self.system_prompt)
        outer.addWidget(lv_box, 0)

    def refresh(self, view: MonitorView) -> None:
        cache = view.cache
        if not cache:
            # no snapshot: the server is coming (connecting; the app waiting for its model file) or is not (a server
            # that failed, an address nothing answers: "waiting" read as if it would come by itself)
            # a server loading its model has no cache yet: "No conversation cache in this server's feed" read as if
            # it had none (a new-user trial's first start)
            loading = view.snapshot and not view.ready and not view.snapshot.get("error")
            # a loading snapshot with the feed gone is not a load still under way (a server killed during it: the
            # header says it failed, and this said the load was waited for): the connection says what there is
            set_text(self.summary, "Waiting for the server to load its model..." if loading and view.connection == "connected"
                     else "No conversation cache in this server's feed." if view.snapshot and not loading
                     else "Waiting for the server..." if view.connection in ("connecting", "waiting")
                     else "No data: not connected (the header says why).")
            return
        if "error" in cache:
            set_text(self.summary, f"The cache's report failed: {cache['error']}")
            return
        parks, hits = cache.get("parks") or {}, cache.get("hits") or {}
        set_text(self.summary, (
            units.phrase(f"Park target <b>{cache.get('park_target', units.NA)}</b>") + f" \u2022 {units.phrase('parked to')} "
            + ", ".join(f"{self._park_name(d)}{units.NBSP}<b>{units.count(parks.get(d))}</b>"
                        for d in PARK_DESTINATIONS)
            + " \u2022 hits "
            + ", ".join(units.phrase(f"{HIT_NAMES[k]} <b>{units.count(hits.get(k))}</b>") for k in HIT_LEVELS)))
        window = plot_window(view)
        set_window(self.parks_plot, window)
        set_window(self.ram_plot, window)
        top = 0.0
        for d, curve in self._park_curves.items():
            xs, ys = xy(view.parks_history.get(d, ()), view.x_now, view.gaps)
            curve.setData(xs, ys)
            top = max([top, *ys])
        self._legend_or_names()
        set_y_top(self.parks_plot, top, minimum=5.0)
        top = max([int(hits.get(k) or 0) for k in HIT_LEVELS] + [1])
        for key, bar in self.hit_bars.items():
            n = int(hits.get(key) or 0)
            bar.set(n, top)
            set_text(self.hit_counts[key], units.count(n))
        self._refresh_admission(cache, view)
        levels = [lv for lv in cache.get("levels") or [] if isinstance(lv, dict)]
        rows = [level_cells(lv) for lv in levels]
        muted = self.theme.muted
        colors = [[None] + [self.theme.warn if lv.get("state") == "read-only" else muted if lv.get("state") != "on"
                            else None] * (len(LEVEL_HEADERS) - 1) for lv in levels]
        self.levels.show_rows(rows, colors, align_right=(3, 4, 5, 6, 7))
        self.levels.fit_height(len(rows))
        parts = [prefix_store_text(name, cache.get(key) or {})
                 for name, key in (("System-prompt cache", "system_prompt_cache"), ("Segments", "segment_tier"))]
        if isinstance(cache.get("sessions_folder"), dict):   # a server before the folder had a budget sends none
            parts.append(sessions_folder_text(cache["sessions_folder"]))
        set_text(self.system_prompt, "<br>".join(parts))

    def _park_name(self, d: str) -> str:
        """A destination's name in the summary, in its curve's colour: the parks plot's key where its legend is
        hidden."""
        # the tag's space stays a space: phrase() (no-break spaces) is applied to the name only
        return f"<span style='color:{self.theme.color(PARK_COLORS[d])}'>{units.phrase(PARK_NAMES[d])}</span>"

    def _legend_or_names(self) -> None:
        """The parks plot's legend where it fits above the curves; hidden where it would cover them (a plot a few rows
        high: at 800 px its three rows took the whole plot, a new-user trial), the summary's coloured names being
        the key then."""
        legend_where_it_fits(self.parks_plot.getPlotItem())

    def _refresh_admission(self, cache: dict, view: MonitorView) -> None:
        adm = cache.get("admission") or {}
        available = adm.get("available_mib")
        parts = [f"available <b>{units.mib(available)}</b>"]
        limit = adm.get("limit_mib")
        if isinstance(limit, (int, float)):     # a container's or slice's limit: its headroom, not the host's RAM
            parts[0] += f" under a memory limit of {units.mib(limit)}"
        for key, name in (("min_free_mib", "parking floor"), ("park_min_free_mib", "transient floor")):
            floor = adm.get(key)
            line = self._floor_lines[key]
            if not isinstance(floor, (int, float)):
                line.setVisible(False)
                continue
            line.setVisible(True)
            line.setValue(floor / 1024)
            if isinstance(available, (int, float)):
                holds = available >= floor
                state = (f"<span style='color:{self.theme.good}'>holds</span>" if holds
                         else f"<span style='color:{self.theme.bad}'>does not hold</span>")
                parts.append(f"{name} {units.mib(floor)} ({LINE_STYLES[key]}) {state}")
        set_text(self.admission, " \u2022 ".join(parts))
        xs, ys = xy(view.available_history, view.x_now, view.gaps)
        self._ram_curve.setData(xs, [y / 1024 for y in ys])
        top = max([*ys, *(adm.get(k) or 0 for k in self._floor_lines)], default=1) / 1024
        set_y_top(self.ram_plot, top, minimum=1.0)
        self._place_floor_labels()
        last = [d for d in adm.get("last") or [] if isinstance(d, dict)]
        self.decisions.show_rows([decision_cells(d, view.now) for d in reversed(last[-50:])], align_right=(0,))
        say_where_ages_count_to(self.decisions, 0, view.feed_lost)

    def _place_floor_labels(self, *_) -> None:
        """Move each shown floor's label to its spot (label_layout.place_labels) in the plot as it is now
        drawn; a label with no spot clear of the lines and the other label is hidden."""
        view_box = self.ram_plot.getPlotItem().getViewBox()
        # the data area, less what the widget does not show (a window below its layout's minimum)
        r = view_box.sceneBoundingRect().intersected(
            self.ram_plot.mapToScene(self.ram_plot.viewport().rect()).boundingRect())
        area = Box(r.left(), r.top(), r.right(), r.bottom())
        shown = [k for k, line in self._floor_lines.items() if line.isVisible()]
        for key in self._floor_labels.keys() - set(shown):
            self._floor_labels[key][0].setVisible(False)
        if not shown or r.width() <= 0 or r.height() <= 0:
            return
        ys, sizes, over_widths = [], [], []
        for key in shown:
            text, name = self._floor_labels[key]
            ys.append(view_box.mapViewToScene(QPointF(0, self._floor_lines[key].value())).y())
            text.setText(name + POINTER)
            over_widths.append(text.textItem.boundingRect().width())
            text.setText(name)
            box = text.textItem.boundingRect()
            sizes.append((box.width(), box.height()))
        for key, spot in zip(shown, place_labels(ys, sizes, over_widths, area), strict=True):
            text, name = self._floor_labels[key]
            text.setVisible(spot is not None)
            if spot is not None:
                text.setText(name + POINTER if spot.side == "over" else name)
                text.setPos(view_box.mapSceneToView(QPointF(spot.box.left, spot.box.top)))


def prefix_store_text(name: str, store: dict) -> str:
    """One line for the system-prompt cache or the segment tier: folder, use of budget, entries."""
    if not store.get("budget_mib"):
        return f"<b>{name}</b> off"
    used = f"{units.mib(store.get('used_mib'))} of {units.mib(store.get('budget_mib'))} used" \
        if "used_mib" in store else f"budget {units.mib(store.get('budget_mib'))} (not started)"
    return (f"<b>{name}</b> {store.get('folder') or units.NA} \u2022 {used} \u2022 {units.count(store.get('entries'))} "
            f"entries{files_at_start_text(store)}")


def sessions_folder_text(folder: dict) -> str:
    """One line for the saved-sessions folder: its use against its budget (or no limit), what a full one does, the
    saves evicted and refused, and its sessions once a session call indexed it."""
    budget = folder.get("budget_mib")
    used = units.mib(folder.get("used_mib"))
    # each figure kept on the line of what it says (units.phrase): a narrow panel read '3 evicted, 2' / 'refused'
    use = (units.phrase(f"{used} of {units.mib(budget)} used") + " "
           + units.phrase(f"({folder.get('when_full') or units.NA} when full)")) if budget \
        else units.phrase(f"{used} used") + ", no limit"
    counts = [units.phrase(f"{units.count(folder.get(k))} {what}")
              for k, what in (("evictions", "evicted"), ("refusals", "refused")) if folder.get(k)]
    entries = (f" \u2022 {units.phrase(units.count(folder.get('entries')) + ' sessions')}"
               f"{files_at_start_text(folder)}" if "entries" in folder else "")
    return (f"<b>Saved sessions</b> {folder.get('folder') or units.NA} \u2022 {use}{entries}"
            + (f" \u2022 {', '.join(counts)}" if counts else ""))
