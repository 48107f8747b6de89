"""With a tray, closing the window hides it and the app (and its server) runs on: the first close says so in a
tray notification, naming the address still served and how to quit. Nothing did: a new-user trial closed the
window, took Strata for quit, and its server went on holding the port and the memory. The offscreen platform has
no tray: a stand-in records what the app raises (tests/app/tray_notes.py); the window, its close and the
server are real."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("PySide6")
from strata.app.controller import AppController  # noqa: E402

from tests.app.test_loading_server_waited_for import LOADING_SERVER  # noqa: E402
from tests.app.tray_notes import TrayNotes  # noqa: E402


def test_the_first_close_into_the_tray_says_the_server_runs_on(qtbot, app_config, tmp_path):
    controller = AppController(app_config, tmp_path / "logs", theme="light")
    tray = controller.tray = TrayNotes()
    controller.keep_in_tray()              # as strata-app's main does where there is a tray
    controller.start(show=True)
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=90_000)
        endpoint = controller.supervisor.status().endpoint
        window = controller.window
        assert window.isVisible()
        window.close()                     # the window's close button
        assert not window.isVisible() and controller.supervisor.status().state == "running"
        assert tray.notes == [("Strata is still running", f"The server goes on serving {endpoint} in the background. "
                               "Quit Strata in this icon's menu stops it.", False)]
        controller.open_monitor()          # the tray's Open monitor, then closed again: said once only
        assert window.isVisible()
        window.close()
        assert not window.isVisible() and len(tray.notes) == 1
    finally:
        controller.shutdown()
    assert controller.supervisor.status().state == "stopped"


def test_a_close_into_the_tray_during_the_load_says_it_loads_then_serves(qtbot, app_config, tmp_path):
    """Closed while the model loads, the notice said "goes on serving URL": nothing was served yet (session 39's
    app trial). The server is test_loading_server_waited_for's stand-in (says where it listens, answers /health
    "loading" for its LOAD_S, 4 s): a real load is over before the window can be closed; the window, its close,
    the supervisor and the tray's wording are real."""
    controller = AppController(app_config, tmp_path / "logs", theme="light")
    tray = controller.tray = TrayNotes()
    controller.keep_in_tray()
    controller.supervisor.command = [sys.executable, "-c", LOADING_SERVER]
    controller.start(show=True)
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().endpoint is not None, timeout=30_000)
        status = controller.supervisor.status()
        assert status.state == "starting", status     # still loading: /health says so for 4 s
        controller.window.close()
        assert not controller.window.isVisible()
        assert tray.notes == [("Strata is still running", f"The server goes on loading its model, then serves "
                               f"{status.endpoint} in the background. Quit Strata in this icon's menu stops it.",
                               False)]
    finally:
        controller.shutdown()
    assert controller.supervisor.status().state == "stopped"
