"""Every end of the app stops the server off the GUI thread, the window drawn meanwhile. Quit did (its own
thread), but the other ends ran the server's stop on the GUI thread, the window frozen for as long as the stop
took (up to 10 minutes): main's end once the Qt loop had returned without Quit (a session's end: Windows emits
aboutToQuit and ends the loop, the platform's own Quit on macOS), aboutToQuit, the last window's close without a
tray. A stand-in server slow to stop (3 s, saying how far it is, as the real one does); a timer on the GUI thread
counts its ticks during the shutdown."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid

import psutil
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
if len(sys.argv) > 6:       # the bounded wait's cap, shortened
    controller.AppController.shutdown.__defaults__ = (float(sys.argv[6]),)
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


# a stand-in that, as the real server does, answers a stop signal during its stop by going on with it (server/cli.py
# on_stop_signal: ALREADY_STOPPING), noting what it is sent and when its stop ends in a file (its output is a pipe
# the ended app no longer reads)
LONG_STOP = stand_in_server(
    "status, body = 200, b'{\"status\": \"ok\"}'",
    head="notes = sys.argv[1]\nsignal.signal(signal.SIGTERM, lambda *a: open(notes, 'a').write(f'SIGTERM {time.monotonic()}\\n'))",
    tail="""
    print('stopping: keeping 2 conversations for the next start (0 of 2 written)', flush=True)
    time.sleep(6)
    open(notes, 'a').write(f'stopped {time.monotonic()}\\n')
    """)


def test_the_app_ending_past_the_cap_says_what_becomes_of_its_server(tmp_path):
    """Past NO_LOOP_STOP_WAIT_S app.log said 'where the system ties the server to the app, it is ended with it',
    and docs/app.md 'on Linux and Windows its server is ended with it'. On Linux the tie is a SIGTERM, which a
    stopping server answers by going on with its stop: it outlives the app, holding its folders (and port) until
    its conversations are written; app.log now names it and says so."""
    logs = tmp_path / "logs"
    config = tmp_path / "config.toml"
    config.write_text("port = 0\n", encoding="utf-8")
    notes = tmp_path / "notes"
    name = "strata-app-test-" + uuid.uuid4().hex[:8]
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    script = LONG_STOP.replace("sys.argv[1]", repr(str(notes)))
    r = subprocess.run([sys.executable, "-c", APP, str(config), str(logs), name, script, "cut", "1"],
                       capture_output=True, text=True, env=env, timeout=120)
    ended = time.monotonic()    # one clock with the stand-in's notes (system-wide on Linux), and no wall-clock step
    assert r.returncode == 0, r.stderr[-3000:]
    app_log = (logs / "app.log").read_text(encoding="utf-8")
    said = [line for line in app_log.splitlines() if "had not ended 1 s later" in line]
    assert said, app_log[-2000:]
    m = re.search(r"the server \(pid (\d+)\) goes on with its stop on its own", said[-1])
    assert m, said[-1]
    pid = int(m.group(1))
    assert f"the app started again meanwhile waits for pid {pid} to end" in said[-1], said[-1]
    assert "is ended with it" not in app_log, said[-1]
    if sys.platform == "linux":     # what really happens: SIGTERM at the app's end, the stop going on past it
        assert psutil.pid_exists(pid), "the server ended with the app"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "stopped" not in (notes.read_text() if notes.exists() else ""):
            time.sleep(0.1)
        # SIGTERM as the app ends (once per app thread: Linux hands the child to the next thread as each ends),
        # its stop ending after the app had
        said = [line.split() for line in notes.read_text().splitlines()]
        assert [w for w, _ in said[:-1]] and {w for w, _ in said[:-1]} == {"SIGTERM"}, said
        assert said[-1][0] == "stopped" and float(said[-1][1]) > ended, (said, ended)


def test_what_becomes_of_the_server_past_the_cap_in_each_platforms_words():
    from strata.app.supervisor import stop_left_behind

    windows = stop_left_behind(4321, 30, windows=True)
    assert "had not ended 30 s later" in windows and "pid 4321" in windows and "lost" in windows, windows
    assert "goes on" not in windows
    other = stop_left_behind(4321, 30, windows=False)
    assert "goes on with its stop" in other and "the app started again meanwhile waits for pid 4321 to end" in other, other
    assert stop_left_behind(None, 30) == "the server's stop had not ended 30 s later: the app ends without waiting for it"


def test_shutdown_entered_again_from_its_own_loop_waits_once(qtbot, tmp_path, caplog):
    """shutdown's loop runs the app's events: aboutToQuit emitted again (a second exit()), a second Quit click, a
    Restart click land in it. Each returns at once; the outer shutdown alone waits for the one stop and ends the
    app's timers (none left to fire into the ended window)."""
    import logging

    caplog.set_level(logging.INFO, logger="strata.app")
    controller = AppController(None, tmp_path / "logs", theme="light",
                               command=[sys.executable, "-c", SLOW_TO_STOP])
    controller.start(show=True)
    inner: list[tuple[str, float]] = []

    def again():
        for name, call in (("shutdown", controller.shutdown), ("quit", controller.quit),
                           ("restart", controller.restart_server)):
            t = time.monotonic()
            call()
            inner.append((name, time.monotonic() - t))

    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=60_000)
        QTimer.singleShot(500, again)
        controller.shutdown()
    finally:
        controller.shutdown()
    assert [n for n, _ in inner] == ["shutdown", "quit", "restart"], inner      # run inside the outer loop
    assert all(took < 0.5 for _, took in inner), inner
    said = [r.getMessage() for r in caplog.records if r.name == "strata.app"]
    assert said.count("stopped") == 1 and sum("stopping the server" in m for m in said) == 1, said
    assert controller.supervisor.status().state == "stopped" and controller.supervisor.status().run == 1
    assert not controller.timer.isActive() and not controller._quit_timer.isActive()
