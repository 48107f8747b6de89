"""An app started while the server an earlier app left behind is still in its clean stop (writing its conversations
to disk, holding this model's conversation folders) waits for that stop and then starts its server. Its server was
refused (the folder in use, exit status 2) and the app said to stop the other server, not retrying: the user had to
find out when it had ended and restart by hand. Waited for only while the holder is stopping (its lock file says so,
server_lock.say_stopping, or the earlier app noted it by pid and start time); a live server of this model, listening
or not yet, is refused as before.

Real processes: the earlier app's main in a subprocess with a real `strata serve` on the tiny model, a conversation
served, its disk writes slowed (STRATA_TEST_DISK_WRITE_DELAY_S), the app's end cut past a 1 s cap (no event loop
left: supervisor.stop_left_behind) so its server goes on stopping on its own; then a second app (the real
controller, offscreen Qt) on the same configuration and log folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid

import psutil
import pytest
from PySide6.QtWidgets import QApplication
from strata.app.controller import AppController
from strata.app.left_behind import look_at_holder, write_note
from strata.app.restart_policy import FolderHolder, HolderLook, RestartConfig, folder_holder, wait_for_holder
from strata.app.supervisor import wait_over, waiting_title

from tests.server.test_terminal_closed import one_conversation

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="on Windows the job object ends the server with the "
                                                                "app; the left-behind stop is Linux's (PDEATHSIG)")

IN_USE = ("--conversation-cache-cold-dir /c: this folder is in use by another strata serve of this model (pid 4321, "
          "running since 2026-12-07 17:00:00); two servers on one folder each miss ...")
END = "end it yourself (kill -9 4321), or restart the computer, then start the server again"


def test_a_stopping_holder_is_waited_for_and_a_live_one_refused_as_before():
    assert folder_holder(2, IN_USE) == FolderHolder(4321, stopping=False)
    assert folder_holder(2, IN_USE.replace(":00)", ":00, stopping since 17:05:01)")) == FolderHolder(4321, True)
    assert folder_holder(2, IN_USE.replace("(pid 4321, ", "(pid 4321 on other, ")) is None    # another host's pid
    assert folder_holder(3, IN_USE) is None and folder_holder(2, "--port x: bad") is None
    said = "keeping 2 conversations for the next start (0.1 of 0.3 MiB written)"
    wait = wait_for_holder(HolderLook(4321, True, True, said), 1.0, 600, END)
    # the note's count is the earlier app's last view, not now's: left out (it read as a stop stuck at 0 written)
    assert wait.action == "wait" and wait.reason == ("for the previous server (pid 4321) to finish saving (keeping 2 "
                                                     "conversations for the next start); then this one starts"), wait
    assert waiting_title(wait.reason) == "Strata is waiting for the previous server to finish saving"
    assert wait_over(wait.reason) == "the previous server (pid 4321) has ended"
    assert wait_for_holder(HolderLook(4321, True, True), 1.0, 600, END).action == "wait"      # its lock says: no note
    assert wait_for_holder(HolderLook(4321, True, False, said), 1.0, 600, END).action == "wait"  # noted by pid+start
    # neither its lock nor a note says it is stopping: a live server (listening, or just started and not yet)
    assert wait_for_holder(HolderLook(4321, True, False), 1.0, 600, END).action == "refuse"
    assert wait_for_holder(HolderLook(4321, False, True), 9.0, 600, END).action == "start"
    gave_up = wait_for_holder(HolderLook(4321, True, True, said), 600, 600, END)
    assert gave_up.action == "give_up" and "still stopping 600 s later" in gave_up.reason and END in gave_up.reason


def test_a_note_or_a_pid_of_another_process_is_not_the_holder(tmp_path):
    """The note and the wait know the holder by its pid and start time: a pid reused by a process started since (the
    holder ended between two looks) is not waited for, nor is a note the holder's once another process has its pid."""
    me = psutil.Process()
    write_note(tmp_path, me.pid, "stopping: keeping 1 conversation")     # the server's own words of its stop
    look = look_at_holder(FolderHolder(me.pid, False), tmp_path)
    assert look.alive and look.said == "keeping 1 conversation" and look.created == me.create_time(), look
    assert wait_for_holder(look, 0.0, 600, END).action == "wait"
    reused = look_at_holder(FolderHolder(me.pid, True), tmp_path, created_then=me.create_time() - 5.0)
    assert not reused.alive and reused.said == "", reused          # another process under the holder's pid
    assert wait_for_holder(reused, 1.0, 600, END).action == "start"
    (tmp_path / "left-behind.json").write_text(
        (tmp_path / "left-behind.json").read_text().replace(str(me.create_time()), str(me.create_time() - 5.0)))
    assert look_at_holder(FolderHolder(me.pid, False), tmp_path).said == ""     # the note of an earlier process


# the earlier app: strata-app's main (a name of its own); once the trigger file exists its loop is ended as a session's
# end does, and 1 s later a second time (no loop left: the stop waited for at most the cap, 1 s, then left behind)
APP = """
import sys
from pathlib import Path
from PySide6.QtCore import QCoreApplication, QTimer
from PySide6.QtWidgets import QApplication
import strata.app.controller as controller
import strata.app.single_instance as single
from strata.app.main import main

single.instance_name = lambda suffix='': sys.argv[3]
controller.AppController.shutdown.__defaults__ = (1.0,)
app = QApplication(sys.argv[:1])
trigger = Path(sys.argv[4])
def tick():
    if trigger.exists():
        timer.stop()
        QTimer.singleShot(0, lambda: QCoreApplication.exit(0))
        QTimer.singleShot(1000, lambda: QCoreApplication.exit(0))
timer = QTimer()
timer.timeout.connect(tick)
timer.start(50)
sys.exit(main(['--config', sys.argv[1], '--log-dir', sys.argv[2]]))
"""
WRITE_DELAY_S = "8"       # each write of the stop's history: its stop outlasts the next server's lock wait (5 s)


def test_a_later_start_waits_for_the_left_behind_stop_then_starts(qtbot, app_config, tmp_path, artifacts):
    logs = tmp_path / "logs"
    trigger = tmp_path / "end-now"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", STRATA_TEST_DISK_WRITE_DELAY_S=WRITE_DELAY_S)
    env.pop("STRATA_API_KEY", None)
    first = subprocess.Popen([sys.executable, "-c", APP, str(app_config), str(logs),
                              "strata-app-test-" + uuid.uuid4().hex[:8], str(trigger)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    left = None
    controller = None
    try:
        deadline = time.monotonic() + 90
        port = None
        while port is None:
            assert first.poll() is None and time.monotonic() < deadline, first.stdout.read()[-3000:]
            text = (logs / "server.log").read_text() if (logs / "server.log").exists() else ""
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
            port = int(m.group(1)) if m else None
            time.sleep(0.1)
        while True:          # the model loaded: a conversation served, which its stop writes to the cold level
            try:
                one_conversation(port)
                break
            except Exception:
                assert time.monotonic() < deadline
                time.sleep(0.3)
        trigger.touch()
        assert first.wait(60) == 0
        app_log = (logs / "app.log").read_text(encoding="utf-8")
        m = re.search(r"the server \(pid (\d+)\) goes on with its stop on its own", app_log)
        assert m, app_log[-3000:]
        left = int(m.group(1))
        assert psutil.pid_exists(left), "the left-behind server had already ended: no wait to test"

        controller = AppController(app_config, logs, theme="light", restart=RestartConfig(max_retries=1))
        controller.start(show=True)
        qtbot.waitUntil(lambda: controller.supervisor.status().state in ("waiting", "failed"), timeout=60_000)
        status = controller.supervisor.status()
        # before: "failed", the server cannot use its conversation folder ... stop it ... then restart the server
        assert status.state == "waiting", (status, list(controller.supervisor.events))
        assert status.detail.startswith(f"for the previous server (pid {left}) to finish saving ("), status.detail
        assert "conversation" in status.detail and status.detail.endswith("; then this one starts"), status.detail
        assert " written)" not in status.detail, status.detail        # no count frozen at the earlier app's end
        qtbot.waitUntil(lambda: controller.status_label.text().startswith("Server waiting for the previous server"),
                        timeout=5_000)
        assert "to finish saving" in controller.model.view().connection_detail
        controller.window.resize(1000, 600)
        QApplication.processEvents()
        assert controller.window.grab().save(str(artifacts / "app-waits-for-the-left-behind-stop.png"))
        # it starts as soon as the left-behind server has ended, on its own
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=120_000)
        assert not psutil.pid_exists(left) or psutil.Process(left).status() == psutil.STATUS_ZOMBIE
        assert controller.supervisor.status().restarts == 0
        events = [text for _, text in controller.supervisor.events]
        assert f"the previous server (pid {left}) has ended: starting the server" in events, events
    finally:
        if controller is not None:
            controller.shutdown()
        if first.poll() is None:
            first.kill()
        if left is not None and psutil.pid_exists(left):
            psutil.Process(left).kill()


def test_a_note_keeps_only_the_server_s_own_words_of_its_stop(tmp_path):
    """The app's state as it ends may be its own words ('stopping the server (it writes 1 conversation to disk
    first, ...)', or 'pid N' had no stop begun): noted whole, they read 'finish saving (stopping the server (it
    writes ...))' or 'finish saving (pid N)'. Only the server's 'stopping: ...' words are kept."""
    me = psutil.Process()
    for detail in ("stopping the server (it writes 1 conversation to disk first, for the next start)", f"pid {me.pid}"):
        write_note(tmp_path, me.pid, detail)
        look = look_at_holder(FolderHolder(me.pid, True), tmp_path)
        wait = wait_for_holder(look, 0.0, 600, END)
        assert wait.reason == f"for the previous server (pid {me.pid}) to finish saving its conversations; then this " \
                              "one starts", wait
