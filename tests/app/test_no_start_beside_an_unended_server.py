"""A server that outlived its kill (the stop failed: "stopped", its pid said) still holds its port and memory: a
later Start or Restart starts no second server beside it, and says so where the user looks (the status bar, the
monitor's header), naming the pid. d8f4dd3 refused only the Restart whose own stop failed: a start() after it
spawned a second server, and a second Restart was refused silently (an event), the header left saying "waiting for
the server to stop" for ever. The stand-in server and its no-op kill are test_stop_that_fails's (see its doc)."""

from __future__ import annotations

import os
import signal
import sys

import pytest

pytest.importorskip("PySide6")
from strata.app.controller import AppController  # noqa: E402
from strata.app.supervisor import STOP_FAILED, ServerSupervisor  # noqa: E402

from tests.app.test_stop_that_fails import SERVER  # noqa: E402
from tests.app.test_supervisor import wait_state  # noqa: E402
from tests.app.tray_notes import TrayNotes  # noqa: E402

REFUSED = "no new one is started beside it"


def unkillable(sup: ServerSupervisor) -> int:
    """The running server's pid, its kill made a no-op (the kernel does not carry it out)."""
    wait_state(sup, {"running"})
    sup._proc.kill = lambda: None
    return sup._proc.pid


def end(sup: ServerSupervisor, pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    sup._proc.wait(10)


@pytest.mark.skipif(os.name == "nt", reason="the stand-in ignores SIGTERM; Windows ends it with TerminateProcess")
def test_a_start_after_a_failed_stop_starts_no_second_server(tmp_path):
    sup = ServerSupervisor(None, tmp_path / "logs", command=[sys.executable, "-c", SERVER],
                           stop_grace_s=0.5, end_wait_s=0.5)
    sup.start()
    pid = None
    try:
        pid = unkillable(sup)
        assert sup.stop() is False
        sup.start()
        st = sup.status()
        assert st.run == 1 and st.state == "stopped", (st, list(sup.events))
        assert st.detail.startswith(STOP_FAILED) and f"pid {pid}" in st.detail and REFUSED in st.detail, st.detail
        assert "port" in st.detail and f"kill -9 {pid}" in st.detail, st.detail
    finally:
        if pid is not None:
            end(sup, pid)
        sup.stop()
    sup.start()                         # ended by hand: a start is made again
    try:
        assert wait_state(sup, {"running"}).run == 2
    finally:
        sup.stop()


@pytest.mark.skipif(os.name == "nt", reason="the stand-in ignores SIGTERM; Windows ends it with TerminateProcess")
def test_a_second_restart_says_it_is_not_made(qtbot, tmp_path):
    controller = AppController(None, tmp_path / "logs", theme="light", command=[sys.executable, "-c", SERVER])
    sup = controller.supervisor
    sup.stop_grace_s, sup.end_wait_s = 0.5, 0.5
    controller.tray = TrayNotes()
    controller.start(show=False)
    pid = None
    try:
        qtbot.waitUntil(lambda: sup.status().state == "running", timeout=30_000)
        pid = unkillable(sup)
        controller.restart_server()
        qtbot.waitUntil(lambda: sup.status().state == "stopped", timeout=30_000)
        qtbot.waitUntil(lambda: not controller._restart_thread.is_alive(), timeout=30_000)
        controller.restart_server()     # clicked again, the old server still there
        qtbot.waitUntil(lambda: not controller._restart_thread.is_alive(), timeout=30_000)
        st = sup.status()
        assert st.run == 1 and REFUSED in st.detail and f"pid {pid}" in st.detail, (st, list(sup.events))
        qtbot.waitUntil(lambda: controller.model.view().connection == "disconnected", timeout=5_000)
        assert controller.status_label.text() == f"Server stopped: {st.detail}"
    finally:
        controller.shutdown()
        if pid is not None:
            end(sup, pid)


def test_the_docs_quote_the_refused_start():
    from pathlib import Path

    from strata.app.supervisor import start_refused

    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "app.md").read_text(encoding="utf-8").split())
    said = start_refused(4242)
    assert f"`Server stopped: {said[:said.index(REFUSED) + len(REFUSED)]} ...`" in page
