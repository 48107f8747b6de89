"""The monitor window: header, slots, cache, requests and log, redrawn from a `MonitorModel` by a
fixed-rate timer (only when the model has something new, so nothing flickers; when and how often:
`redraw_policy`).

It owns no data and does no I/O: a `FeedClient` (or a test) fills the model from its own thread.
The theme follows the system's light/dark setting unless one is forced.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, Qt, QTimer
from PySide6.QtGui import QGuiApplication, QIcon
from PySide6.QtWidgets import QMainWindow, QSplitter, QVBoxLayout, QWidget
from strata.monitor.model import MonitorModel
from strata.monitor.redraw_policy import TICK_S, headline, redraw_due, server_busy
from strata.monitor.widgets import theme as themes
from strata.monitor.widgets.cache import CachePanel
from strata.monitor.widgets.header import Header
from strata.monitor.widgets.panels_area import PanelsArea
from strata.monitor.widgets.requests import ActivityTabs
from strata.monitor.widgets.slots import SlotsPanel

DEFAULT_SIZE = (1280, 800)
TITLE_BAR_PX = 40
LAYOUT_PASSES = 3        # a layout may ask for another (a wrapped label's new height): nested ones, a few deep        # the window manager's frame is unknown before the window is shown: room for it


class MonitorWindow(QMainWindow):
    def __init__(self, model: MonitorModel, *, theme: str = "system", title: str = "Strata monitor") -> None:
        super().__init__()
        self.model = model
        self.theme_name = theme
        self.hide_on_close = False     # the app sets it when a tray icon keeps it running
        self.on_hidden: Callable[[], None] | None = None   # told when a close hid it (the app: says it runs on)
        # asked before the window closes (the app without a tray): False keeps it open, its server still stopping
        self.may_close: Callable[[], bool] | None = None
        self.setWindowTitle(title)
        icon = Path(__file__).resolve().parents[1] / "resources" / "strata.png"
        if icon.is_file():
            self.setWindowIcon(QIcon(str(icon)))
        self.resize(*fitted_size(DEFAULT_SIZE, QGuiApplication.primaryScreen()))
        self._drawn_version = -1
        self.clock = time.monotonic           # a test or benchmark may step its own
        self._drawn_at, self._drawn_busy, self._drawn_headline = float("-inf"), False, None
        self._build(themes.choose(theme))
        self.timer = QTimer(self)
        self.timer.setInterval(round(TICK_S * 1000))
        self.timer.timeout.connect(self.tick)
        self.timer.start()
        hints = QGuiApplication.styleHints()
        if theme == "system" and hasattr(hints, "colorSchemeChanged"):
            # a bound method, not a lambda over the window: the application-wide hints held the lambda, so the
            # window was never freed, and a change after its end called into a deleted window
            hints.colorSchemeChanged.connect(self._follow_system_colours)

    def _build(self, theme: themes.Theme) -> None:
        themes.apply_palette(theme)
        self.theme = theme
        central = QWidget()
        layout = QVBoxLayout(central)
        layout.setContentsMargins(6, 4, 6, 6)
        layout.setSpacing(4)
        self.header = Header(theme)
        layout.addWidget(self.header)
        self.slots = SlotsPanel(theme)
        self.activity = ActivityTabs(theme)
        self.cache = CachePanel(theme)
        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.slots)
        left.addWidget(self.activity)
        left.setSizes([430, 250])
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(self.cache)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        split.setSizes([770, 510])
        self.panels = PanelsArea(split)    # scrolled, not squeezed, in a window shorter than they need
        layout.addWidget(self.panels, 1)
        self.setCentralWidget(central)
        self.setStyleSheet(f"QLabel#muted {{ color: {theme.muted}; }}")
        self._drawn_version = -1
        self.redraw(force=True)

    def _follow_system_colours(self, *_) -> None:
        self._build(themes.choose("system"))

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if self.hide_on_close:
            event.ignore()
            self.hide()
            if self.on_hidden is not None:
                self.on_hidden()
        elif self.may_close is not None and not self.may_close():
            event.ignore()
        else:
            super().closeEvent(event)

    def can_be_seen(self) -> bool:
        """Shown, not minimized, and exposed (Qt says a window covered by others, on another desktop or
        minimized is not, where the platform tells it)."""
        handle = self.windowHandle()
        return (self.isVisible() and not self.isMinimized() and handle is not None and handle.isExposed())

    def tick(self) -> None:
        """The timer's: redraws when `redraw_policy` says it is due."""
        if redraw_due(new_data=self.model.version != self._drawn_version, can_be_seen=self.can_be_seen(),
                      busy=self._drawn_busy, since_last_draw_s=self.clock() - self._drawn_at,
                      headline_changed=self.model.headline() != self._drawn_headline):
            self.redraw()

    def redraw(self, force: bool = False) -> None:
        """Draws the model's latest view, when it is new and the window can be seen (hidden to the
        tray, it costs nothing)."""
        if self.model.version == self._drawn_version or not (force or self.isVisible()):
            return
        view = self.model.view()
        self._drawn_version = view.version
        self._drawn_at, self._drawn_busy = self.clock(), server_busy(view)
        self._drawn_headline = headline(view.connection, view.snapshot)
        for part in (self.header, self.slots, self.cache, self.activity):
            part.refresh(view)
        self.panels.fit()                  # new text may wrap to more lines

    def save_png(self, path: str | Path) -> Path:
        """Renders the window as it is now into a PNG file (works offscreen)."""
        self.redraw(force=True)
        # the new texts' layout first: it waits for the event loop, and the picture showed the last one (after a
        # restart, 'connected' in the room a long disconnection reason had taken, the address cut off)
        for _ in range(LAYOUT_PASSES):
            QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest.value)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not self.grab().save(str(path), "PNG"):
            raise OSError(f"could not write the screenshot {path}")
        return path


def fitted_size(size: tuple[int, int], screen) -> tuple[int, int]:
    """`size`, made no larger than the screen's free area with a title bar above it (1280x800 ran past the
    bottom of a 1366x768 screen, status bar and all); the window's least size still applies."""
    if screen is None:
        return size
    free = screen.availableGeometry()
    return min(size[0], free.width()), min(size[1], free.height() - TITLE_BAR_PX)
