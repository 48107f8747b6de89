"""The monitor window's lifetime: one that follows the system's colours is freed when dropped, and a colour
change after its end touches nothing. Its colorSchemeChanged slot was a lambda over the window, connected to
the application-wide style hints: the hints held every such window for the process's life (no reference count
or collector could free it), and a scheme change after the window's C++ side was gone called into it
(RuntimeError: Internal C++ object (MonitorWindow) already deleted, half a new layout built first)."""

from __future__ import annotations

import gc
import weakref

import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, Qt
from PySide6.QtGui import QGuiApplication
from strata.monitor.model import MonitorModel
from strata.monitor.window import MonitorWindow


def _scheme_changes():
    hints = QGuiApplication.styleHints()
    scheme = hints.colorScheme()
    return hints.colorSchemeChanged, (Qt.ColorScheme.Dark if scheme != Qt.ColorScheme.Dark else Qt.ColorScheme.Light)


def test_a_window_following_the_system_is_freed_when_dropped(qapp):
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()           # reference counting alone: what holds it would keep it
    try:
        window = MonitorWindow(MonitorModel(), theme="system")
        alive = weakref.ref(window)
        del window
        assert alive() is None, [type(r).__name__ for r in gc.get_referrers(alive())]
    finally:
        if enabled:
            gc.enable()


def test_a_colour_change_after_the_window_is_gone_touches_nothing(qtbot):
    window = MonitorWindow(MonitorModel(), theme="system")
    header = window.header
    changed, other = _scheme_changes()
    changed.emit(other)                     # a live window builds its panels again in the system's colours
    assert window.header is not header and shiboken6.isValid(window.header)
    window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete.value)
    assert not shiboken6.isValid(window)
    changed.emit(other)                     # pytest-qt fails the test on an exception raised in a slot
    qtbot.wait(10)
