"""Without a tray (some Linux desktops; offscreen here) closing the window quits the app. The window stays
until the server has stopped, saying so in its status bar, and the app then ends by itself. Before, the
window vanished at once and the app stopped its server unseen, its GUI thread blocked meanwhile (a second
launch then found an app that could not answer). In a subprocess: a Qt loop that has run and quit in the
test process leaves later tests' bench threads unanswered."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

SCRIPT = """
import json, sys
from pathlib import Path
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QLabel
from strata.app.main import main
from strata.monitor.window import MonitorWindow

app = QApplication(sys.argv[:1])
log = Path(sys.argv[2]) / "server.log"
seen = {"closed": False, "visible_after_close": None, "texts": []}

def window():
    return next(w for w in QApplication.topLevelWidgets() if isinstance(w, MonitorWindow))

def watch():
    if not seen["closed"] and log.exists() and "listening on" in log.read_text():
        w = window()
        w.close()                      # what the window's close button does
        seen["closed"] = True
        seen["visible_after_close"] = w.isVisible()
    elif seen["closed"]:
        w = window()
        if w.isVisible():
            seen["texts"] += [lb.text() for lb in w.statusBar().findChildren(QLabel) if lb.text()]

timer = QTimer()
timer.timeout.connect(watch)
timer.start(50)
code = main(["--config", sys.argv[1], "--log-dir", sys.argv[2]])
print(json.dumps({"code": code, **seen}))
"""


def test_closing_the_window_without_a_tray_keeps_it_until_the_server_stopped(app_config, tmp_path):
    logs = tmp_path / "logs"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(app_config), str(logs)], capture_output=True, text=True,
                       env=env, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["code"] == 0 and got["closed"], got
    assert got["visible_after_close"] is True, got
    assert any(t.startswith("Server stopping") for t in got["texts"]), got["texts"][-5:]
    assert "stopping" in (logs / "server.log").read_text(encoding="utf-8")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_without_a_tray_still_ends_the_app_after_its_server(app_config, tmp_path):
    """Qt's quit closes the windows first, and the window refuses its first close while the server stops:
    the app's own quit, once the server has stopped, ends it (a logout or `kill` ends the app as before)."""
    logs = tmp_path / "logs"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.Popen([sys.executable, "-m", "strata.app.main", "--config", str(app_config),
                             "--log-dir", str(logs)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        log = logs / "server.log"
        while not (log.exists() and "listening on" in log.read_text(encoding="utf-8")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=5)
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "stopping" in log.read_text(encoding="utf-8")
