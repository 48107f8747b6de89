"""A Restart while the server is down raises no second "the server is down" notification for the same failure. The
app took its own "stopping" (set as the Restart was asked) for the state last seen, and the next poll, which still
found the failure (no server to stop, so "stopping" is never shown), took it for a new one: notified and logged
again. The server is a real child process: the first fails (0 retries), the restarted one starts and stays."""

from __future__ import annotations

import sys
import threading

import pytest
from strata.app.restart_policy import RestartConfig

pytest.importorskip("PySide6")
from strata.app.controller import AppController  # noqa: E402

from tests.app.tray_notes import TrayNotes  # noqa: E402

DOWN = "Strata: the server is down"


def test_a_restart_while_failed_does_not_say_it_is_down_again(qtbot, tmp_path):
    ran = tmp_path / "ran-once"
    server = [sys.executable, "-c", f"import os, sys\nif not os.path.exists({str(ran)!r}):\n"
              f"    open({str(ran)!r}, 'w').close(); print('the disk is gone', flush=True); sys.exit(1)\n"
              "sys.stdin.read()\n"]
    controller = AppController(None, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=0),
                               command=server)
    sup = controller.supervisor
    tray = controller.tray = TrayNotes()
    controller.start(show=False)
    try:
        qtbot.waitUntil(lambda: tray.titles() == [DOWN], timeout=30_000)
        controller.timer.stop()
        # the restart thread's first step comes after the app's next poll (a busy machine: the timer's tick first)
        polled, restart = threading.Event(), sup.restart
        sup.restart = lambda: (polled.wait(10), restart())
        controller.restart_server()
        controller.poll()
        polled.set()
        controller.timer.start()
        qtbot.waitUntil(lambda: sup.status().state == "starting" and sup.status().pid is not None, timeout=30_000)
        qtbot.wait(3 * 300)               # a few of the app's polls
    finally:
        controller.shutdown()
    assert tray.titles() == [DOWN], tray.notes
