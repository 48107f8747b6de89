"""A crash loop raises two tray notifications, not one per restart: one when it begins (the first restart)
and one when the app gives up. A review counted 5 in ~18 s (each restart's, then the give-up's)."""

from __future__ import annotations

import sys

import pytest
from strata.app.restart_policy import RestartConfig, notify_restarts

pytest.importorskip("PySide6")
from strata.app.controller import AppController  # noqa: E402

from tests.app.tray_notes import TrayNotes  # noqa: E402


def test_a_crash_loop_notifies_its_first_restart_and_the_give_up(qtbot, tmp_path):
    crash = [sys.executable, "-c", "import sys; print('model file is gone', flush=True); sys.exit(1)"]
    controller = AppController(None, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=4),
                               command=crash)
    tray = controller.tray = TrayNotes()
    controller.start(show=False)
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "failed", timeout=60_000)
        qtbot.waitUntil(lambda: any("down" in title for title in tray.titles()), timeout=10_000)
    finally:
        controller.shutdown()
    assert controller.supervisor.status().restarts == 4
    assert tray.titles() == ["Strata restarted the server", "Strata: the server is down"]
    assert "restart 1 of 4" in tray.texts()[0] and "gave up after 4 restarts" in tray.texts()[1]


@pytest.mark.parametrize("new, in_a_row, notify", [
    (0, 0, False),
    (1, 1, True),       # a crash loop's first restart
    (1, 2, False),      # its next ones
    (2, 2, True),       # two since the last look, the first of them the run's first
    (1, 3, False),
    (1, 1, True),       # a new run after a stable one (its count starts again)
])
def test_notify_restarts(new, in_a_row, notify):
    assert notify_restarts(new, in_a_row) is notify
