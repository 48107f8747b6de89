""""Set up again…" from the app: the wizard on the configuration file, its answers proposed; Finish writes it
(keeping the keys setup does not decide) and the app restarts its real server on it; Cancel changes nothing;
a reason that says "run the setup again" shows the button beside it. The app's messages said to run the setup
again, and the app had no way to: a packaged app's user has no terminal for `strata setup`."""

from __future__ import annotations

import tomli_w
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QWizard
from shiboken6 import isValid
from strata.app.controller import AppController
from strata.app.restart_policy import RestartConfig, offers_setup_again
from strata.installer.config_file import read


def _controller(path, tmp_path) -> AppController:
    return AppController(path, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=1))


def _open_wizard(qtbot, controller):
    controller.setup_action.trigger()                    # the window's Server menu (the tray's does the same)
    qtbot.waitUntil(lambda: controller.setup_wizard is not None and controller.setup_wizard.isVisible(),
                    timeout=10_000)
    return controller.setup_wizard


def _next(qtbot, wizard, expected):
    before = wizard.currentId()
    wizard.next()
    qtbot.waitUntil(lambda: wizard.currentId() != before, timeout=10_000)
    assert wizard.currentId() == wizard.page_ids[expected]
    return wizard.currentPage()


def test_finish_writes_the_file_and_restarts_the_server_on_it(qtbot, app_config, tmp_path, artifacts):
    before, _ = read(app_config)
    controller = _controller(app_config, tmp_path)
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=60_000)
        first_pid = controller.supervisor.status().pid
        wizard = _open_wizard(qtbot, controller)
        assert wizard.currentId() == wizard.page_ids["model"]
        assert wizard.page(wizard.page_ids["model"]).combo.currentText() == before["model"]  # the file's model
        # the bench would load the model a second time beside the running server's: not run, and said why
        page = _next(qtbot, wizard, "bench")
        assert not wizard.run_bench and "the server is running" in page.status.text()
        # nor a bar at 100 % and a Skip button for what never ran (a new-user trial's screenshot had both)
        assert page.bar.isHidden() and page.skip_button.isHidden()
        page = _next(qtbot, wizard, "concurrency")
        assert page.several.isChecked() and "batch = 2" in page.reason.text()   # the file's answer, said so
        page.one.setChecked(True)                        # one change: one request at a time
        _next(qtbot, wizard, "disk")
        page = _next(qtbot, wizard, "context")
        assert page.combo.currentText() == str(before["ctx"])
        _next(qtbot, wizard, "plan")
        assert controller.supervisor.status().pid == first_pid     # nothing restarted before Finish
        wizard.button(QWizard.WizardButton.FinishButton).click()
        qtbot.waitUntil(lambda: controller.setup_wizard is None, timeout=10_000)
        after, _ = read(app_config)
        assert after["batch"] == 0 and after["ctx"] == before["ctx"] and after["model"] == before["model"]
        for key in ("host", "port", "conversation_cache_system_prompt_dir", "conversation_cache_sessions_dir"):
            assert after[key] == before[key], key        # the keys setup does not decide are kept
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running"
                        and controller.supervisor.status().pid not in (None, first_pid), timeout=90_000)
        # the new server read the new file: no batch slots now (the feed's slots are the main context's only)
        qtbot.waitUntil(lambda: controller.model.view().connection == "connected", timeout=30_000)
        qtbot.waitUntil(lambda: len(controller.model.view().slots) == 1, timeout=30_000)
        assert controller.supervisor.status().restarts == 0
    finally:
        controller.shutdown()


def test_cancel_changes_nothing_and_the_server_keeps_running(qtbot, app_config, tmp_path):
    text = app_config.read_bytes()
    controller = _controller(app_config, tmp_path)
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=60_000)
        pid = controller.supervisor.status().pid
        wizard = _open_wizard(qtbot, controller)
        _next(qtbot, wizard, "bench")
        _next(qtbot, wizard, "concurrency")
        wizard.reject()
        qtbot.waitUntil(lambda: controller.setup_wizard is None, timeout=10_000)
        for _ in range(5):                               # a few polls: no restart was started
            qtbot.wait(POLL_WAIT_MS)
            assert controller.supervisor.status().pid == pid and controller.supervisor.status().state == "running"
        assert app_config.read_bytes() == text and not app_config.with_suffix(".toml.bak").exists()
    finally:
        controller.shutdown()


POLL_WAIT_MS = 300


def test_a_model_file_that_does_not_appear_offers_set_up_again(qtbot, app_config, tmp_path, artifacts):
    values, _ = read(app_config)
    app_config.write_text(tomli_w.dumps({**values, "model": str(tmp_path / "moved.gguf")}), encoding="utf-8")
    controller = _controller(app_config, tmp_path)
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "waiting", timeout=60_000)
        assert "run the setup again" in controller.supervisor.status().detail
        qtbot.waitUntil(lambda: not controller.setup_button.isHidden(), timeout=10_000)
        qtbot.waitUntil(lambda: "waiting" in controller.window.header.state.text(), timeout=10_000)
        controller.window.resize(1000, 600)
        QApplication.processEvents()
        assert controller.window.grab().save(str(artifacts / "app-set-up-again-button.png"))
        qtbot.mouseClick(controller.setup_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: controller.setup_wizard is not None, timeout=10_000)
        assert controller.setup_wizard.run_bench               # no server: the bench runs as on a first run
        assert controller.setup_button.isHidden()        # not offered twice while the wizard is open
        controller.setup_wizard.reject()
        qtbot.waitUntil(lambda: controller.setup_wizard is None, timeout=10_000)
        assert controller.supervisor.status().state == "waiting"
    finally:
        controller.shutdown()


def test_quitting_with_the_wizard_open_closes_it_and_writes_nothing(qtbot, app_config, tmp_path):
    values, _ = read(app_config)
    app_config.write_text(tomli_w.dumps({**values, "model": str(tmp_path / "moved.gguf")}), encoding="utf-8")
    text = app_config.read_bytes()
    controller = _controller(app_config, tmp_path)
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "waiting", timeout=60_000)
        wizard = _open_wizard(qtbot, controller)
        wizard.page(wizard.page_ids["bench"]).skip()     # the bench, if it starts, stops at once
    finally:
        controller.shutdown()
    # the shutdown waits for the server's stop in an event loop of its own, where the wizard's deleteLater is done
    assert controller.setup_wizard is None and (not isValid(wizard) or not wizard.isVisible())
    assert app_config.read_bytes() == text


def test_the_button_follows_the_reasons_advice():
    assert offers_setup_again("failed", "the server refused its configuration: x; fix the configuration file "
                                        "(or run the setup again)")
    assert offers_setup_again("waiting", "for the model file /m.gguf: ...; or choose another model (run the "
                                         "setup again)")
    assert not offers_setup_again("failed", "the server cannot listen on its address: ...")
    assert not offers_setup_again("running", "run the setup again")


def test_the_tray_menu_has_set_up_again(qtbot, artifacts):
    from PySide6.QtGui import QIcon
    from strata.app.tray import Tray

    calls = []
    tray = Tray(QIcon(), on_open=lambda: None, on_copy=lambda: None, on_restart=lambda: None, on_quit=lambda: None,
                on_setup=lambda: calls.append("setup"))
    try:
        texts = [a.text() for a in tray.menu.actions()]
        assert texts.index("Set up again\u2026") == texts.index("Restart server") + 1
        tray.menu.adjustSize()
        assert tray.menu.grab().save(str(artifacts / "tray-menu-set-up-again.png"))
        tray.setup_action.trigger()
        assert calls == ["setup"]
    finally:
        tray.hide()


def test_a_model_that_does_not_appear_is_replaced_through_set_up_again(qtbot, app_config, tmp_path,
                                                                       tiny_model_factory):
    """The user story of the wait's advice: choose another model in the wizard, and the server starts on it."""
    values, _ = read(app_config)
    app_config.write_text(tomli_w.dumps({**values, "model": str(tmp_path / "moved.gguf")}), encoding="utf-8")
    other = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)
    controller = _controller(app_config, tmp_path)
    controller.start()
    try:
        qtbot.waitUntil(lambda: not controller.setup_button.isHidden(), timeout=60_000)
        qtbot.mouseClick(controller.setup_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: controller.setup_wizard is not None, timeout=10_000)
        wizard = controller.setup_wizard
        wizard.run_bench = False                         # no server to share the machine with; not this test's
        wizard.page(wizard.page_ids["model"]).combo.setCurrentText(str(other))
        for name in ("bench", "concurrency", "disk", "context", "plan"):
            _next(qtbot, wizard, name)
        wizard.button(QWizard.WizardButton.FinishButton).click()
        qtbot.waitUntil(lambda: controller.setup_wizard is None, timeout=10_000)
        assert read(app_config)[0]["model"] == str(other)
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=90_000)
        assert controller.setup_button.isHidden()
    finally:
        controller.shutdown()
