"""Restart server (the tray's) does not freeze the window: the supervisor's stop waits for the server to park
its conversations (up to 15 s before SIGTERM) and ran on the GUI thread, so the window drew nothing meanwhile.
A real child process that stops 2 s after its standard input ends stands in for a server parking a lot."""

from __future__ import annotations

import os
import sys

from strata.app.controller import AppController

SLOW_TO_STOP = [sys.executable, "-c", "import sys, time; sys.stdin.read(); time.sleep(2)"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_restart_returns_at_once_and_says_stopping(qtbot, tmp_path):
    controller = AppController(None, tmp_path / "logs", theme="light", command=SLOW_TO_STOP)
    controller.supervisor.stop_grace_s = 10.0
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().pid is not None, timeout=60_000)
        old = controller.supervisor.status().pid
        controller.restart_server()
        assert alive(old)              # back on the GUI thread while the old server still parks (2 s)
        qtbot.waitUntil(lambda: "stopping" in controller.status_label.text(), timeout=10_000)
        controller.restart_server()    # a second click while one is under way starts nothing more
        qtbot.waitUntil(lambda: controller.supervisor.status().pid not in (None, old), timeout=60_000)
        assert not alive(old)
        assert controller.supervisor.status().state == "starting"
    finally:
        controller.shutdown()
    assert controller.supervisor.status().state == "stopped"
