""""Set up again…" then Finish with nothing changed leaves the running server as it is: docs/install.md says a re-run
then Finish changes nothing, yet the app restarted its server (its slots emptied, the feed started again: a new-user
trial). The written file's values are compared with the file the running server was started on (its comments, the
time it was written in them, the server does not read); the status bar says the server was not restarted."""

from __future__ import annotations

import time

from PySide6.QtWidgets import QWizard
from strata.app.controller import AppController
from strata.app.restart_policy import UNCHANGED, RestartConfig, SetupRestart, setup_restarts

RUNNING = '# Written 2026-12-06T08:00:00\nmodel = "m.gguf"\nctx = 4096\n\n[env]\nSTRATA_SLOT_TTL_MAX_S = "60"\n'


def test_an_equal_configuration_leaves_a_serving_server_alone():
    rewritten = RUNNING.replace("08:00:00", "09:00:00").replace("ctx = 4096", "# the context\nctx = 4096")
    assert setup_restarts(True, RUNNING, rewritten) == SetupRestart(False, UNCHANGED)
    assert setup_restarts(True, RUNNING, RUNNING.replace("4096", "2048")).restart               # a value changed
    assert setup_restarts(True, RUNNING, RUNNING.replace('"60"', '"30"')).restart               # [env] too
    assert setup_restarts(False, RUNNING, RUNNING).restart           # failed, waiting, stopped: started as before
    assert setup_restarts(True, None, RUNNING).restart               # not known what it runs on
    assert setup_restarts(True, RUNNING, "ctx = [").restart          # a file no TOML reader takes


def finish_from_model_page(qtbot, wizard) -> float:
    """The wizard walked on from its model page with the proposed answers, then Finish clicked; returns how long the
    click held the GUI thread."""
    for name in ("bench", "concurrency", "disk", "context", "plan"):
        wizard.next()
        qtbot.waitUntil(lambda want=name: wizard.currentId() == wizard.page_ids[want], timeout=10_000)
    t0 = time.monotonic()
    wizard.button(QWizard.WizardButton.FinishButton).click()
    return time.monotonic() - t0


def click_finish(qtbot, controller) -> float:
    """"Set up again…" opened and finished with the proposed answers (finish_from_model_page)."""
    controller.setup_action.trigger()
    qtbot.waitUntil(lambda: controller.setup_wizard is not None and controller.setup_wizard.isVisible(),
                    timeout=10_000)
    return finish_from_model_page(qtbot, controller.setup_wizard)


def _finish_with_the_proposed_answers(qtbot, controller) -> None:
    click_finish(qtbot, controller)
    qtbot.waitUntil(lambda: controller.setup_wizard is None, timeout=10_000)


def finish_restarts(qtbot, controller) -> None:
    """Finish with the proposed answers restarts the running server: it runs again, another process."""
    status = controller.supervisor.status
    before = status().pid
    _finish_with_the_proposed_answers(qtbot, controller)
    qtbot.waitUntil(lambda: status().state == "running" and status().pid not in (None, before), timeout=90_000)


def finish_changes_nothing(qtbot, controller) -> None:
    """Finish with the proposed answers leaves the running server alone, and the status bar says why."""
    status = controller.supervisor.status
    pid, runs = status().pid, status().run
    _finish_with_the_proposed_answers(qtbot, controller)
    for _ in range(5):                               # a few polls: no restart was started
        qtbot.wait(300)
        assert (status().state, status().pid, status().run) == ("running", pid, runs)
    assert controller.window.statusBar().currentMessage() == f"Set up again: {UNCHANGED}"


def test_finish_with_nothing_changed_does_not_restart_the_server(qtbot, app_config, tmp_path, artifacts):
    controller = AppController(app_config, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=1))
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=60_000)
        # the fixture's file is not one setup wrote (setup adds the keys it decides): the first Finish changes it
        finish_restarts(qtbot, controller)
        # the same answers again: the same file but for the time it was written
        finish_changes_nothing(qtbot, controller)
        for name, size in (("default", None), ("640x440", (640, 440))):
            if size:
                controller.window.resize(*size)
            qtbot.wait(100)
            assert controller.window.grab().save(str(artifacts / f"app-set-up-again-unchanged-{name}.png"))
    finally:
        controller.shutdown()
