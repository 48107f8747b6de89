"""Qt objects are never freed off the GUI thread: the controller is no reference cycle (reference counting
frees it where it is dropped), and the app and `strata monitor` collect cycles on the GUI thread only
(monitor/gui_thread_gc.py).
CI once hung for 85 minutes right after the first app test; the controller had become a cycle (its
supervisor's model probe was a lambda over it), collected later in whichever thread allocated."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest
from PySide6.QtWidgets import QSystemTrayIcon
from strata.app.controller import AppController
from strata.monitor.gui_thread_gc import GuiThreadCollector


@pytest.mark.parametrize("tray", [False, True])
def test_a_dropped_controller_is_freed_at_once(qtbot, tmp_path, monkeypatch, tray):
    """With a tray too (a desktop's; offscreen has none, so the test says there is one): the icon's click
    handler was a lambda over the controller's open_monitor, held by the icon the controller holds, a loop
    through Qt's connection that neither reference counting nor the collector can free."""
    if tray:
        monkeypatch.setattr(QSystemTrayIcon, "isSystemTrayAvailable", staticmethod(lambda: True))
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()           # only reference counting: a cycle would keep it
    try:
        controller = AppController(tmp_path / "config.toml", tmp_path / "logs", theme="light")
        assert (controller.tray is not None) == tray
        alive, window = weakref.ref(controller), weakref.ref(controller.window)
        icon = weakref.ref(controller.tray.icon) if tray else lambda: None
        controller.shutdown()
        del controller
        assert alive() is None and window() is None, [type(r).__name__ for r in gc.get_referrers(alive())]
        assert icon() is None
    finally:
        if enabled:
            gc.enable()


def _drop_a_cycle(freed_on: list[int]) -> None:
    class Node:
        def __del__(self) -> None:
            freed_on.append(threading.get_ident())
    node = Node()
    node.me = node


def _allocate_in_a_thread() -> int:
    """Enough young containers that the automatic collector runs (in this thread) when it is on."""
    def work() -> None:
        keep = [[] for _ in range(20 * gc.get_threshold()[0])]
        del keep
    t = threading.Thread(target=work)
    t.start()
    t.join()
    return t.ident


@pytest.mark.parametrize("collector", [False, True])
def test_cycles_are_collected_on_the_gui_thread_only(qtbot, collector):
    running = GuiThreadCollector(tick_ms=50) if collector else None
    freed_on: list[int] = []
    try:
        gc.collect()
        _drop_a_cycle(freed_on)
        worker = _allocate_in_a_thread()
        if running is None:
            # the case the collector is for: the cycle went with the worker's allocations, on its thread
            assert freed_on == [worker]
            return
        assert freed_on == []
        qtbot.waitUntil(lambda: bool(freed_on), timeout=2_000)
        assert freed_on == [threading.get_ident()]
    finally:
        if running is not None:
            running.stop()
    assert gc.isenabled()


def test_bad_collector_settings_are_named():
    with pytest.raises(ValueError, match="tick_ms and full_every must be above 0; got 0 and 30"):
        GuiThreadCollector(tick_ms=0)
