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


def test_the_status_bar_says_starting_while_the_model_file_is_looked_at(qtbot, app_config, tmp_path):
    """Before a start the app looks at the configured model file (model_file.py): on a slow or hung drive that look
    takes as long as the drive does, and until it was done the supervisor's state stayed "stopped: not started". A
    new-user trial's first screenshot of the window showed that in the status bar under the header's "connecting -
    starting the server". The look here is held until the test lets it go (a drive that answers late)."""
    import threading

    from strata.app import model_file

    answered, asked = threading.Event(), threading.Event()

    def slow_drive(env):
        asked.set()
        answered.wait(30)
        return model_file.look_for_configured_model(app_config, (), env)

    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    controller = AppController(app_config, tmp_path / "logs", theme="light", command=sleeper)
    controller.supervisor.model_probe = slow_drive
    controller.start()
    try:
        assert asked.wait(10)
        controller.poll()                   # what the window's timer does every 300 ms
        assert controller.status_label.text() == "Server starting: starting the server"
        assert controller.supervisor.status().state == "starting"
        answered.set()
        qtbot.waitUntil(lambda: controller.supervisor.status().pid is not None, timeout=10_000)
        controller.poll()
        assert controller.status_label.text() == "Server starting: starting the server"
    finally:
        answered.set()
        controller.shutdown()
