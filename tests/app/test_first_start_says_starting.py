"""The header at the app's first start says the server is being started. A new-user trial (session 28) saw a
bare "connecting" (no address, no reason) from the window's opening until the server listened (seconds; the
status bar said "Server: starting"); after a restart it said "connecting — starting the server" already. The
server here is a real process that has not listened yet (a Python that sleeps), so the state holds."""

from __future__ import annotations

import sys

from strata.app.controller import AppController


def test_the_first_start_says_starting_the_server(qtbot, app_config, tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    controller = AppController(app_config, tmp_path / "logs", theme="light", command=sleeper)
    controller.start()
    try:
        assert controller.model.view().connection_detail == "starting the server"    # before the first poll too
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "starting", timeout=10_000)
        qtbot.waitUntil(lambda: "starting the server" in controller.window.header.state.text(), timeout=5_000)
        state = controller.window.header.state.text()
        assert "connecting" in state and "starting the server" in state, state
        assert controller.model.view().connection == "connecting"
    finally:
        controller.shutdown()
