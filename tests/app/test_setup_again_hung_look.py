""""Set up again…"'s Finish looks at the model file (has it been replaced since the server started on it?) off the
GUI thread. It looked on the GUI thread: a model file on a network share that did not answer (or a slow disk) froze
the whole window for as long as its stat() did. Now the window keeps drawing, the status bar says the file is being
checked and then what it waits for, the new settings stay in the file Finish wrote, the server runs on untouched, and
the decision is made once the look ends. The look is held through the app's own seam (the supervisor's
model_probe), as test_restart_after_a_hung_look holds it; a real server on a real model file."""

from __future__ import annotations

import shutil
import time

import tomli_w
from PySide6.QtCore import QTimer
from strata.app.controller import AppController
from strata.app.restart_policy import ModelFile, RestartConfig, setup_needs_look

try:
    import tomllib
except ModuleNotFoundError:        # Python 3.10
    import tomli as tomllib

from tests.app.test_setup_again_unchanged import (
    RUNNING,
    click_finish,
    finish_from_model_page,
    finish_restarts,
)

HELD_S = 20        # before the change the Finish click returned only after this (the look held on the GUI thread)


def test_only_an_equal_configuration_on_a_known_model_file_waits_for_a_look():
    then = ModelFile("/models/m.gguf", "file", True, (1000, 5, 77))
    assert setup_needs_look(True, RUNNING, RUNNING.replace("08:00:00", "09:00:00"), then)
    assert not setup_needs_look(True, RUNNING, RUNNING.replace("4096", "2048"), then)   # restarted without a look
    assert not setup_needs_look(False, RUNNING, RUNNING, then)                          # not serving: started
    assert not setup_needs_look(True, RUNNING, RUNNING, None)                           # no probe
    assert not setup_needs_look(True, RUNNING, RUNNING, ModelFile(None))                # an id: the server resolves it


def test_finish_during_a_hung_look_at_the_model_file_keeps_the_window_drawn(qtbot, app_config, tmp_path,
                                                                            tiny_model_factory, artifacts):
    model = tmp_path / "model.gguf"           # its own copy, replaced below
    values = tomllib.loads(app_config.read_text(encoding="utf-8"))
    shutil.copyfile(values["model"], model)
    app_config.write_text(tomli_w.dumps({**values, "model": str(model)}), encoding="utf-8")
    controller = AppController(app_config, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=1))
    sup = controller.supervisor
    sup.slow_look_s = 0.5
    controller.start()
    ticks = []
    beat = QTimer()
    beat.setInterval(50)
    beat.timeout.connect(lambda: ticks.append(time.monotonic()))
    look = sup.model_probe
    try:
        qtbot.waitUntil(lambda: sup.status().state == "running", timeout=60_000)
        finish_restarts(qtbot, controller)        # the fixture's file made setup's: the next Finish equal to it
        pid = sup.status().pid
        hung, released = [], []

        def held(env):       # the model file's drive does not answer until let go
            if not released:
                hung.append(1)
                deadline = time.monotonic() + HELD_S
                while not released and time.monotonic() < deadline:
                    time.sleep(0.05)
            return look(env)

        sup.model_probe = held
        beat.start()
        held_for = click_finish(qtbot, controller)
        assert held_for < 2, held_for              # before: HELD_S, the window frozen meanwhile
        assert hung, "Finish did not look at the model file"
        qtbot.waitUntil(lambda: controller.setup_wizard is None, timeout=10_000)
        said = controller.window.statusBar().currentMessage()
        assert said.startswith("Set up again: checking the model file"), said
        n = len(ticks)
        qtbot.wait(1500)
        assert len(ticks) - n >= 10, len(ticks) - n        # the GUI thread goes on with its events
        said = controller.window.statusBar().currentMessage()
        assert said.startswith("Set up again: the model file's drive is not answering (looked at since "), said
        assert "the new settings are saved" in said, said
        assert controller.window.grab().save(str(artifacts / "app-set-up-again-hung-look.png"))
        # nothing half-applied: the server runs on, the settings are in the file
        assert (sup.status().state, sup.status().pid) == ("running", pid)
        assert tomllib.loads(app_config.read_text(encoding="utf-8"))["model"] == str(model)
        # the file replaced while its drive hung (same size, another model): once the look ends it is seen
        shutil.copyfile(tiny_model_factory(ctx_len=4096, n_vocab=512, seed=4), model)
        released.append(1)
        qtbot.waitUntil(lambda: sup.status().state == "running" and sup.status().pid not in (None, pid),
                        timeout=90_000)
        assert "not answering" not in controller.window.statusBar().currentMessage()
    finally:
        beat.stop()
        sup.model_probe = look
        controller.shutdown()


def test_a_later_finish_that_changes_the_settings_does_not_wait_for_the_hung_look(qtbot, app_config, tmp_path,
                                                                                  tiny_model_factory):
    """A second Finish during the hung look, on another model: its configuration restarts the server whatever the
    look finds, so it is applied at once. It waited for the first Finish's look (a drive that may never answer)."""
    model = tmp_path / "model.gguf"
    values = tomllib.loads(app_config.read_text(encoding="utf-8"))
    shutil.copyfile(values["model"], model)
    app_config.write_text(tomli_w.dumps({**values, "model": str(model)}), encoding="utf-8")
    other = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=5)
    controller = AppController(app_config, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=1))
    sup = controller.supervisor
    controller.start()
    look = sup.model_probe
    released = []
    try:
        qtbot.waitUntil(lambda: sup.status().state == "running", timeout=60_000)
        finish_restarts(qtbot, controller)
        pid = sup.status().pid
        hung = []

        def held(env):       # the running model's drive: does not answer until let go (the test's end)
            if not released:
                hung.append(1)
                deadline = time.monotonic() + 300
                while not released and time.monotonic() < deadline:
                    time.sleep(0.05)
            return look(env)

        sup.model_probe = held
        click_finish(qtbot, controller)                  # equal settings: waits for the look, which hangs
        qtbot.waitUntil(lambda: bool(hung) and controller.setup_wizard is None, timeout=10_000)
        assert controller._setup_look is not None
        sup.model_probe = look                           # the new model's drive answers
        controller.setup_action.trigger()
        qtbot.waitUntil(lambda: controller.setup_wizard is not None and controller.setup_wizard.isVisible(),
                        timeout=10_000)
        controller.setup_wizard.page(controller.setup_wizard.page_ids["model"]).combo.setCurrentText(str(other))
        finish_from_model_page(qtbot, controller.setup_wizard)
        # before: no restart until the first look ended (here: never within the wait)
        qtbot.waitUntil(lambda: sup.status().state == "running" and sup.status().pid not in (None, pid),
                        timeout=60_000)
        assert not released and sup.started_model().path == str(other), sup.started_model()
    finally:
        released.append(1)
        sup.model_probe = look
        controller.shutdown()

