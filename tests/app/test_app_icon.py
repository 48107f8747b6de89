"""The app gives every window its icon: the first-run wizard, which has no parent window to take it from, showed the
platform's generic icon (a new-user trial; only the monitor window set its own). In a subprocess: the application's
icon is process-wide."""

from __future__ import annotations

import os
import subprocess
import sys

FIRST_RUN = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from strata.app.main import main
app = QApplication(sys.argv[:1])
seen = []
def look():
    w = QApplication.activeModalWidget()
    if w is None:
        QTimer.singleShot(100, look)
        return
    seen.append((type(w).__name__, w.windowIcon().isNull(), w.windowIcon().availableSizes()))
    w.reject()
QTimer.singleShot(200, look)
code = main(["--config", sys.argv[1], "--log-dir", sys.argv[2]])
print(code, seen)
"""


def test_the_first_run_wizard_has_the_apps_icon(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env.update(QT_QPA_PLATFORM="offscreen", HOME=str(tmp_path / "home"))
    r = subprocess.run([sys.executable, "-c", FIRST_RUN, str(tmp_path / "missing.toml"), str(tmp_path / "logs")],
                       capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    code, seen = r.stdout.strip().splitlines()[-1].split(" ", 1)
    assert code == "1", r.stdout                                   # cancelled: the app ends
    assert seen.startswith("[('SetupWizard', False, [PySide6.QtCore.QSize(256, 256)"), seen
