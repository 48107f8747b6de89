"""Every end of the app stops the server off the GUI thread, the window drawn meanwhile. Quit did (its own
thread), but the other ends ran the server's stop on the GUI thread, the window frozen for as long as the stop
took (up to 10 minutes): main's end once the Qt loop had returned without Quit (a session's end: Windows emits
aboutToQuit and ends the loop, the platform's own Quit on macOS), aboutToQuit, the last window's close without a
tray. A stand-in server slow to stop (3 s, saying how far it is, as the real one does); a timer on the GUI thread
counts its ticks during the shutdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from PySide6.QtCore import QTimer
from strata.app.controller import AppController

from tests.app.stand_in_server import stand_in_server

SLOW_TO_STOP = stand_in_server(
    "status, body = 200, b'{\"status\": \"ok\"}'",
    tail="""
    print('stopping: keeping 2 conversations for the next start (0 of 2 written)', flush=True)
    time.sleep(1.5)
    print('stopping: keeping 2 conversations for the next start (1 of 2 written)', flush=True)
    time.sleep(1.5)
    print('stopped; kept for the next start: cold', flush=True)
    """)


def test_a_shutdown_without_quit_keeps_the_gui_thread_going(qtbot, tmp_path):
    """shutdown() as main's end, aboutToQuit and the last window's close call it, on the GUI thread."""
    controller = AppController(None, tmp_path / "logs", theme="light",
                               command=[sys.executable, "-c", SLOW_TO_STOP])
    controller.start(show=True)
    ticks: list[float] = []
    texts: list[str] = []

    def tick():
        ticks.append(time.monotonic())
        if not texts or texts[-1] != controller.status_label.text():
            texts.append(controller.status_label.text())

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(50)
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=60_000)
        t0 = time.monotonic()
        controller.shutdown()
        took = time.monotonic() - t0
    finally:
        timer.stop()
        controller.shutdown()
    during = [t for t in ticks if t >= t0]
    assert took > 2.5, took                              # the stand-in's stop was waited for
    assert controller.supervisor.status().state == "stopped"
    assert len(during) >= took / 0.05 / 3, (len(during), took)       # it ticked on (none at all before)
    gaps = [b - a for a, b in zip([t0, *during][:-1], during, strict=True)]
    assert max(gaps) < 1.5, ("the GUI thread stalled", max(gaps))
    assert "Server stopping: keeping 2 conversations for the next start (1 of 2 written)" in texts, texts


# strata-app's main in a subprocess (tray answered yes, a name of its own, the stand-in as its server): once the
# server listens, the Qt loop is ended by something else than Quit (QCoreApplication.exit, as a session's end
# does); with `cut`, a second exit 1 s into the shutdown ends its loop too (no loop left: the bounded wait).
APP = """
import json, sys, time
from pathlib import Path
from PySide6.QtCore import QCoreApplication, QTimer
from PySide6.QtWidgets import QApplication, QLabel, QSystemTrayIcon
import strata.app.controller as controller
import strata.app.single_instance as single
from strata.app.main import main
from strata.monitor.window import MonitorWindow

QSystemTrayIcon.isSystemTrayAvailable = staticmethod(lambda: True)
single.instance_name = lambda suffix='': sys.argv[3]
controller.server_command = lambda config_path, extra=(): [sys.executable, '-c', sys.argv[4]]
cut = sys.argv[5] == 'cut'
app = QApplication(sys.argv[:1])
log = Path(sys.argv[2]) / 'server.log'
seen = {'exit_at': None, 'ticks': [], 'texts': [], 'visible': []}

def tick():
    now = time.monotonic()
    if seen['exit_at'] is None:
        if log.exists() and 'listening on' in log.read_text():
            seen['exit_at'] = now
            # not from this timer's own slot: Qt 6 emits aboutToQuit inside exit(), and a timer is not fired again
            # while its slot runs (a session's end comes from the platform's event, not from a timer of the app's)
            QTimer.singleShot(0, lambda: QCoreApplication.exit(0))
            if cut:
                QTimer.singleShot(1000, lambda: QCoreApplication.exit(0))
        return
    seen['ticks'].append(now)
    w = next(w for w in QApplication.topLevelWidgets() if isinstance(w, MonitorWindow))
    seen['visible'].append(w.isVisible())
    texts = [lb.text() for lb in w.statusBar().findChildren(QLabel) if lb.text()]
    if texts and (not seen['texts'] or seen['texts'][-1] != texts[0]):
        seen['texts'].append(texts[0])

timer = QTimer()
timer.timeout.connect(tick)
timer.start(50)
code = main(['--config', sys.argv[1], '--log-dir', sys.argv[2]])
seen['ended_at'] = time.monotonic()
print(json.dumps({'code': code, **seen}))
"""


@pytest.mark.parametrize("cut", ["whole", "cut"])
def test_the_loop_ended_without_quit_stops_the_server_with_the_window_drawn(tmp_path, cut):
    logs = tmp_path / "logs"
    config = tmp_path / "config.toml"
    config.write_text("port = 0\n", encoding="utf-8")
    name = "strata-app-test-" + uuid.uuid4().hex[:8]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-c", APP, str(config), str(logs), name, SLOW_TO_STOP, cut],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    server_log = (logs / "server.log").read_text(encoding="utf-8")
    app_log = (logs / "app.log").read_text(encoding="utf-8")
    assert got["code"] == 0, got
    assert "stopped; kept for the next start" in server_log, server_log[-2000:]     # the stop was waited for
    took = got["ended_at"] - got["exit_at"]
    assert took > 2.5, took
    ticks = got["ticks"]
    if cut == "whole":
        assert len(ticks) >= took / 0.05 / 3, (len(ticks), took)      # none at all before: a frozen window
        assert all(got["visible"]), got["visible"]
        assert any("(1 of 2 written)" in t for t in got["texts"]), got["texts"]
        assert "no event loop" not in app_log, app_log[-2000:]
    else:
        assert ticks and ticks[-1] - got["exit_at"] < 2.0, ticks[-3:]   # the loop was ended: nothing drawn after
        assert "no event loop to keep the window drawn" in app_log and "waiting up to 30 s for the server's stop" \
            in app_log, app_log[-2000:]
        assert "had not ended" not in app_log
