"""Python's cyclic garbage collected on the GUI thread only.

The collector runs in whichever thread happens to allocate when a generation fills up: in the app and in
`strata monitor`, often the supervisor's, the monitor feed's or the wizard's bench thread. A Qt object
inside a reference cycle (a widget whose slot is a closure over its owner) is then destroyed off the GUI
thread, which Qt does not allow: the process crashes or hangs. So the GUI entry points (app/main.py,
monitor/cli.py) turn the automatic collector off and collect from a timer on the GUI thread instead (the
young generations each tick, everything every `FULL_EVERY` ticks); reference counting frees everything
else at once, as before.

Not here: breaking cycles (the code that makes them should not), or anything about the server process,
which has no Qt.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

TICK_MS = 1000        # a young collection each second: a few ms at most in the app's heap
FULL_EVERY = 30       # and a full one every 30 s


class GuiThreadCollector(QObject):
    """Turns the automatic collector off while it runs; `stop()` turns it back on (tests share a process)."""

    def __init__(self, parent: QObject | None = None, tick_ms: int = TICK_MS, full_every: int = FULL_EVERY) -> None:
        super().__init__(parent)
        if tick_ms <= 0 or full_every <= 0:
            raise ValueError(f"tick_ms and full_every must be above 0; got {tick_ms} and {full_every}")
        self.full_every = full_every
        self.ticks = 0
        self._was_enabled = gc.isenabled()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.collect)
        self.timer.start(tick_ms)

    def collect(self) -> None:
        self.ticks += 1
        gc.collect(2 if self.ticks % self.full_every == 0 else 1)

    def stop(self) -> None:
        self.timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()
        if self.parent() is not None:
            self.deleteLater()
