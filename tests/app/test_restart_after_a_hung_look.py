"""A look at the model file that hangs (a network or removable drive not answering) past the stop's wait: a Restart
clicked meanwhile stopped nothing (no server yet), waited the stop's bound for the look, then found the look's
thread still there and started nothing, without a word: the status bar said `Server stopped: stopped` for good,
even once the look ended. Now the Restart says what it waits for, and starts the server when the look ends.
The look is held through the app's own seam (the supervisor's model_probe), the real look running once let go."""

from __future__ import annotations

import logging
import re
import sys
import threading
import time

from strata.app.controller import AppController

from tests.app.stand_in_server import stand_in_server
from tests.app.tray_notes import TrayNotes

# a stand-in that says where it listens, answers /health ok, and counts its starts in the file named first
SERVER = stand_in_server("status, body = 200, b'{\"status\": \"ok\"}'",
                         head="open(sys.argv[1], 'a').write('s\\n')")


def hold_the_look(sup) -> tuple[threading.Event, threading.Event]:
    """The supervisor's looks at the model file held, as a drive that does not answer, until `released` is set (the
    real look then made); `hung` is set as the first is held. Returns (hung, released)."""
    look = sup.model_probe
    hung, released = threading.Event(), threading.Event()

    def probe(env):
        if not released.is_set():
            hung.set()
            released.wait(120)
        return look(env)

    sup.model_probe = probe
    return hung, released


def test_a_restart_during_a_hung_look_says_so_and_starts_when_the_look_ends(qtbot, tmp_path):
    starts = tmp_path / "starts"
    controller = AppController(None, tmp_path / "logs", theme="light",
                               command=[sys.executable, "-c", SERVER, str(starts)])
    sup = controller.supervisor
    sup.stop_cap_s = 0.5          # the stop's wait for the supervision's thread: stop_cap_s + 10 s (was 610 s)
    hung, released = hold_the_look(sup)
    controller.start(show=True)
    try:
        qtbot.waitUntil(hung.is_set, timeout=10_000)
        t0 = time.monotonic()
        controller.restart_server()
        # said plainly, and soon: not after the stop's bound, and never "stopped: stopped" with nothing to come
        qtbot.waitUntil(lambda: "look at the model file" in controller.status_label.text(), timeout=20_000)
        said = controller.status_label.text()
        assert time.monotonic() - t0 < 5, said
        assert said.startswith("Server waiting"), said
        assert "look at the model file" in controller.model.view().connection_detail, \
            controller.model.view().connection_detail
        assert not starts.exists()
        time.sleep(1.0)
        assert "look at the model file" in controller.status_label.text(), controller.status_label.text()
        released.set()            # the drive answers: the restart goes on by itself
        qtbot.waitUntil(lambda: sup.status().state == "running", timeout=30_000)
        qtbot.waitUntil(lambda: controller.status_label.text().startswith("Server running"), timeout=5_000)
        assert starts.read_text().count("s") == 1, list(sup.events)
    finally:
        released.set()
        controller.shutdown()
    assert sup.status().state == "stopped"


def test_quit_during_a_hung_look_is_not_held_by_it(qtbot, tmp_path):
    """No server to stop while the look hangs: Quit ended the app only after the stop's bound (10 minutes by
    default) waiting for the look's thread; that thread starts nothing once its stop is asked."""
    starts = tmp_path / "starts"
    controller = AppController(None, tmp_path / "logs", theme="light",
                               command=[sys.executable, "-c", SERVER, str(starts)])
    sup = controller.supervisor
    sup.stop_cap_s = 0.5
    hung, released = hold_the_look(sup)
    controller.start(show=True)
    look_thread = sup._thread
    try:
        qtbot.waitUntil(hung.is_set, timeout=10_000)
        t0 = time.monotonic()
        controller.quit()
        qtbot.waitUntil(lambda: controller._shut, timeout=20_000)
        assert time.monotonic() - t0 < 5
        assert sup.status().state == "stopped"
    finally:
        controller.shutdown()
        released.set()
    # the look ends after the Quit: its thread goes on to its configuration look and the spawn gate, where it is
    # refused (checked before that thread had got there, this passed whatever the gate did)
    look_thread.join(10)
    assert not look_thread.is_alive()
    assert not starts.exists(), list(sup.events)


def test_the_first_start_during_a_hung_look_says_what_it_waits_for(qtbot, tmp_path, caplog):
    """The first start's own look hanging: the status bar said `Server starting: starting the server` for as long
    as the drive did not answer (a Restart said what it waited for); now, past slow_look_s, the same words."""
    starts = tmp_path / "starts"
    controller = AppController(None, tmp_path / "logs", theme="light",
                               command=[sys.executable, "-c", SERVER, str(starts)])
    sup = controller.supervisor
    sup.slow_look_s = 0.5
    caplog.set_level(logging.INFO, logger="strata.app")
    hung, released = hold_the_look(sup)
    controller.tray = TrayNotes()
    controller.start(show=True)
    try:
        qtbot.waitUntil(hung.is_set, timeout=10_000)
        qtbot.waitUntil(lambda: "look at the model file" in controller.status_label.text(), timeout=10_000)
        assert controller.tray.titles() == ["Strata is waiting for a drive to answer"], controller.tray.notes
        said = controller.status_label.text()
        assert said.startswith("Server waiting for the look at the model file begun at "), said
        assert said.endswith("(its drive is slow or not answering); the server starts once it has"), said
        assert "look at the model file" in controller.model.view().connection_detail
        assert not starts.exists()
        released.set()
        qtbot.waitUntil(lambda: controller.status_label.text().startswith("Server running"), timeout=30_000)
        assert starts.read_text().count("s") == 1, list(sup.events)
        # app.log: the look's end, not 'the model file is there now' (said before the file had been looked at)
        said = [r.getMessage() for r in caplog.records if r.name == "strata.app"]
        assert any(re.match(r"the look at the model file begun at \d\d:\d\d:\d\d has ended; server ", m)
                   for m in said), said
        assert not any(m.startswith("the model file is there now") for m in said), said
    finally:
        released.set()
        controller.shutdown()
