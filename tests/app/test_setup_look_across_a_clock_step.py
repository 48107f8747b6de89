"""Set up again's look at the model file is timed on the monotonic clock: a wall-clock step during the look (this
VM's clock stepped 25 s in a CI dry run; an NTP correction, a laptop's resume) does not make the status bar say the
drive is not answering at once (a step forward) nor keep it saying the file is being checked (a step back). It took
time.time() - begun. A real controller and a real look held on its thread; the step is the one thing stood in for
(a test cannot step the system's clock)."""

from __future__ import annotations

import threading
import time

from strata.app.background_look import BackgroundLook
from strata.app.controller import AppController


def test_a_wall_clock_step_does_not_time_the_look(app_config, tmp_path, qtbot, monkeypatch):
    controller = AppController(app_config, tmp_path / "logs", theme="light")
    released = threading.Event()
    try:
        controller.supervisor.slow_look_s = 60.0
        controller._setup_look = BackgroundLook(lambda: released.wait(30), name="strata-test-look")
        controller._setup_written = (app_config, None)
        wall = time.time
        monkeypatch.setattr(time, "time", lambda: wall() + 3600)     # the wall clock steps an hour forward
        controller._say_setup_look()
        monkeypatch.undo()
        said = controller.window.statusBar().currentMessage()
        assert said.startswith("Set up again: checking the model file"), said    # before: "... not answering"
        controller.supervisor.slow_look_s = 0.2
        qtbot.wait(300)
        controller._say_setup_look()
        said = controller.window.statusBar().currentMessage()
        assert said.startswith("Set up again: the model file's drive is not answering"), said
    finally:
        monkeypatch.undo()
        released.set()
        controller._setup_look = None
        controller.shutdown()
