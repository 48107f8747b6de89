"""A server that does not end even when killed (a process in uninterruptible sleep: a hung network drive or disk)
leaves the app's stop with an end: the state moves on to "stopped", saying the stop failed, the server's pid and
what to do; a Restart starts no second server beside it, and Quit still quits. The kill step's timeout raised
out of the stopping thread: "stopping" was shown for ever, and Quit's second stop raised in the GUI thread.

The server is a stand-in (a real child process that ignores SIGTERM and its input's end). Only its SIGKILL is
not sent (its `kill` made a no-op): a process the kernel does not end cannot be made here without root. The app,
its window (offscreen) and its supervisor's threads are real."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
from strata.app.controller import AppController  # noqa: E402
from strata.app.supervisor import STOP_FAILED, ServerSupervisor, stop_failed  # noqa: E402

from tests.app.stand_in_server import stand_in_server  # noqa: E402
from tests.app.tray_notes import TrayNotes  # noqa: E402

SERVER = stand_in_server("""
    body = b'{"status": "ok"}'
    status = 200 if self.path == "/health" else 404
""", head="signal.signal(signal.SIGTERM, signal.SIG_IGN)", tail="time.sleep(600)")


@pytest.mark.skipif(os.name == "nt", reason="the stand-in ignores SIGTERM; Windows ends it with TerminateProcess")
def test_a_server_that_does_not_die_ends_the_stop_and_quit_still_quits(qtbot, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="strata.app")
    controller = AppController(None, tmp_path / "logs", theme="light", command=[sys.executable, "-c", SERVER])
    sup = controller.supervisor
    sup.stop_grace_s, sup.end_wait_s = 0.5, 0.5
    tray = controller.tray = TrayNotes()
    controller.start(show=False)
    pid = None
    try:
        qtbot.waitUntil(lambda: sup.status().state == "running", timeout=30_000)
        proc = sup._proc
        pid = proc.pid
        proc.kill = lambda: None          # the kernel does not carry the SIGKILL out (see the module's doc)
        controller.restart_server()
        life = sup.status().life
        # the Restart's whole course, not a fixed wait: on a loaded machine a start made after 1 s went unseen
        qtbot.waitUntil(lambda: not controller._restart_thread.is_alive(), timeout=30_000)
        st = sup.status()
        assert st.state == "stopped" and st.life == life, sup.events    # no start made (a start is a new life)
        assert st.run == 1, sup.events    # no second server beside the one still there
        assert st.detail.startswith(STOP_FAILED) and f"pid {pid}" in st.detail, st
        assert f"kill -9 {pid}" in st.detail and "Task Manager" not in st.detail, st.detail   # the platform's own advice
        qtbot.waitUntil(lambda: controller.status_label.text() == f"Server stopped: {st.detail}", timeout=10_000)
        assert controller.model.view().connection == "disconnected"
        assert tray.titles() == ["Strata: the server did not stop"], tray.notes
        assert any(f"pid {pid}" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
        controller.quit()                 # its stop has nothing left to try: the app ends at once
        qtbot.waitUntil(lambda: controller._shut, timeout=10_000)
        assert sup.status().detail == st.detail
        assert len(tray.notes) == 1, tray.notes      # said once, not again at Quit
    finally:
        controller.shutdown()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            sup._proc.wait(10)


def test_the_wait_for_the_end_is_a_checked_number(tmp_path):
    with pytest.raises(ValueError, match="end_wait_s must be > 0, got 0"):
        ServerSupervisor(None, tmp_path, command=[sys.executable, "-c", ""], end_wait_s=0)


def test_the_docs_quote_the_failed_stop():
    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "app.md").read_text(encoding="utf-8").split())
    said = stop_failed(4242)
    assert f"`Server stopped: {said[:said.index(' even when killed') + len(' even when killed')]} ...`" in page
    assert "kill -9 4242" in said and "kill -9 4242" in page and "Strata: the server did not stop" in page
