"""A second launch while the first-run wizard is open brings that wizard forward and exits. A new-user trial
(session 28) started strata-app twice before finishing the setup: the second opened a wizard of its own (its
bench loading the model beside the first's), and both would then have started a server on one port. The first
app now listens for a second launch from its start, the wizard included. The first is strata-app's real `main`
(offscreen); the second a real `strata-app` process under the same instance name."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid

import strata.app.single_instance as single_instance
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from strata.app.main import main

# strata-app's main under the instance name argv[1], its configuration argv[2] (missing: the wizard) and log folder
SECOND = ("import sys\n"
          "import strata.app.single_instance as single\n"
          "single.instance_name = lambda suffix='': sys.argv[1]\n"
          "from strata.app.main import main\n"
          "print('exit', main(['--config', sys.argv[2], '--log-dir', sys.argv[3]]), flush=True)\n")


def test_a_second_launch_during_the_first_run_wizard_brings_it_forward(qtbot, tmp_path, monkeypatch):
    name = "strata-app-test-" + uuid.uuid4().hex[:8]
    monkeypatch.setattr(single_instance, "instance_name", lambda suffix="": name)
    config, logs, second_logs = tmp_path / "config.toml", tmp_path / "logs", tmp_path / "second-logs"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    seen: dict[str, object] = {}

    def launch_second() -> None:
        wizard = QApplication.activeModalWidget()
        if wizard is None:
            QTimer.singleShot(100, launch_second)
            return
        seen["wizard"] = wizard
        wizard.showMinimized()                  # the user left it behind another window
        seen["proc"] = subprocess.Popen([sys.executable, "-c", SECOND, name, str(config), str(second_logs)], env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        QTimer.singleShot(100, wait_for_second)

    def wait_for_second() -> None:
        proc = seen["proc"]
        if proc.poll() is None and len(seen.setdefault("polls", [])) < 600:      # at most 60 s
            seen["polls"].append(1)
            QTimer.singleShot(100, wait_for_second)
            return
        if proc.poll() is None:                 # it opened a wizard of its own: never ends by itself
            proc.kill()
        seen["out"], seen["err"] = proc.communicate()
        seen["minimized_after"] = seen["wizard"].isMinimized()
        seen["wizard"].reject()

    QTimer.singleShot(200, launch_second)
    app = QApplication.instance()
    try:
        code = main(["--config", str(config), "--log-dir", str(logs)])
    finally:
        app.setQuitOnLastWindowClosed(True)
    assert code == 1 and not config.exists()               # the first's wizard, cancelled at the end
    proc = seen["proc"]
    assert proc.returncode == 0 and seen["out"].strip() == "exit 0", (proc.returncode, seen["out"], seen["err"][-2000:])
    assert "strata-app: already running; it has been brought forward" in seen["err"]
    assert seen["minimized_after"] is False                # the first's wizard came forward
    second_log = (second_logs / "app.log").read_text(encoding="utf-8")
    assert "first run, showing the setup wizard" not in second_log, second_log


def test_a_second_launch_restores_a_minimized_monitor_window(qtbot, app_config, tmp_path, monkeypatch):
    """The same for the monitor's window once the app runs: show() and raise_() left it minimized."""
    from strata.monitor.window import MonitorWindow

    name = "strata-app-test-" + uuid.uuid4().hex[:8]
    monkeypatch.setattr(single_instance, "instance_name", lambda suffix="": name)
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    seen: dict[str, object] = {}

    def launch_second() -> None:
        window = next((w for w in QApplication.topLevelWidgets() if isinstance(w, MonitorWindow) and w.isVisible()),
                      None)
        if window is None:
            QTimer.singleShot(100, launch_second)
            return
        window.showMinimized()
        seen["window"] = window
        seen["proc"] = subprocess.Popen([sys.executable, "-c", SECOND, name, str(app_config), str(tmp_path / "l2")],
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        QTimer.singleShot(100, wait_for_second)

    def wait_for_second() -> None:
        proc = seen["proc"]
        if proc.poll() is None and len(seen.setdefault("polls", [])) < 600:
            seen["polls"].append(1)
            QTimer.singleShot(100, wait_for_second)
            return
        if proc.poll() is None:
            proc.kill()
        seen["out"], seen["err"] = proc.communicate()
        seen["minimized_after"] = seen["window"].isMinimized()
        os.kill(os.getpid(), signal.SIGTERM)     # quits as the tray's Quit does

    QTimer.singleShot(200, launch_second)
    app = QApplication.instance()
    try:
        code = main(["--config", str(app_config), "--log-dir", str(tmp_path / "logs")])
    finally:
        app.setQuitOnLastWindowClosed(True)
    assert code == 0
    assert seen["proc"].returncode == 0 and "already running" in seen["err"], (seen["out"], seen["err"][-2000:])
    assert seen["minimized_after"] is False
