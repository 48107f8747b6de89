"""A second launch while the first-run wizard is open brings that wizard forward and exits. A new-user trial
(session 28) started strata-app twice before finishing the setup: the second opened a wizard of its own (its
bench loading the model beside the first's), and both would then have started a server on one port. The first
app now listens for a second launch from its start, the wizard included. The first is strata-app's real `main`
(offscreen); the second a real `strata-app` process under the same instance name."""

from __future__ import annotations

import os
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


# strata-app's main under the instance name argv[1] with the configuration argv[2], log folder argv[3]: minimizes its
# monitor window once shown and says so; once the file argv[4] exists (the second launch has ended) says whether the
# window is still minimized and quits as the tray's Quit does (SIGTERM). In a process of its own: a SIGTERM'd main
# leaves this process's QApplication quitting, which cancelled every later test's dialogs and wizards.
FIRST = ("import os, signal, sys\n"
         "from pathlib import Path\n"
         "from PySide6.QtCore import QTimer\n"
         "from PySide6.QtWidgets import QApplication\n"
         "import strata.app.single_instance as single\n"
         "single.instance_name = lambda suffix='': sys.argv[1]\n"
         "from strata.app.main import main\n"
         "from strata.monitor.window import MonitorWindow\n"
         "app = QApplication(sys.argv[:1])\n"
         "state = {}\n"
         "def poll():\n"
         "    window = state.get('window')\n"
         "    if window is None:\n"
         "        window = next((w for w in QApplication.topLevelWidgets()\n"
         "                       if isinstance(w, MonitorWindow) and w.isVisible()), None)\n"
         "        if window is not None:\n"
         "            window.showMinimized()\n"
         "            state['window'] = window\n"
         "            print('minimized', flush=True)\n"
         "    elif Path(sys.argv[4]).exists() and 'said' not in state:\n"
         "        state['said'] = True\n"
         "        print('minimized_after', window.isMinimized(), flush=True)\n"
         "        os.kill(os.getpid(), signal.SIGTERM)\n"
         "timer = QTimer()\n"
         "timer.timeout.connect(poll)\n"
         "timer.start(100)\n"
         "print('exit', main(['--config', sys.argv[2], '--log-dir', sys.argv[3]]), flush=True)\n")


def test_a_second_launch_restores_a_minimized_monitor_window(app_config, tmp_path):
    """The same for the monitor's window once the app runs: show() and raise_() left it minimized."""
    name = "strata-app-test-" + uuid.uuid4().hex[:8]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    second_ended = tmp_path / "second-ended"
    first = subprocess.Popen([sys.executable, "-c", FIRST, name, str(app_config), str(tmp_path / "logs"),
                              str(second_ended)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "minimized", first.stderr.read()[-2000:] if first.poll() else ""
        second = subprocess.run([sys.executable, "-c", SECOND, name, str(app_config), str(tmp_path / "l2")],
                                env=env, capture_output=True, text=True, timeout=120)
        second_ended.touch()
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 0 and "already running" in second.stderr, (second.stdout, second.stderr[-2000:])
    assert "minimized_after False" in out, (out, err[-2000:])   # the first's monitor window came forward
    assert first.returncode == 0 and "exit 0" in out, (out, err[-2000:])
