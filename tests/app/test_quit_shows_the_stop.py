"""Quit stops the server off the GUI thread: the status bar shows the server's progress lines while it writes
its conversations ("Server stopping: keeping ... written"), and the app ends once the server has. Before, Quit
stopped the server on the GUI thread with the poll timer off: the window froze, saying nothing, for as long as
the stop took (a big model's: a minute or more)."""

from __future__ import annotations

import sys

from strata.app.controller import AppController, status_text
from strata.app.supervisor import ServerStatus

# a server as the app sees it: at the end of its input it says how far its stop is, twice, then ends
SERVER = ("import sys, time\n"
          "print('ready', flush=True)\n"
          "sys.stdin.read()\n"
          "print('2026-12-04 20:00:00,000 INFO strata.server: stopping: keeping 2 conversations for the next start "
          "(0.0 of 2.0 MiB written)', flush=True)\n"
          "time.sleep(1.5)\n"
          "print('stopping: keeping 2 conversations for the next start (1.0 of 2.0 MiB written)', flush=True)\n"
          "time.sleep(1.5)\n"
          "print('stopped; kept for the next start: cold', flush=True)\n")


def test_quit_shows_the_stop_in_the_status_bar_and_ends_when_the_server_has(qtbot, tmp_path):
    controller = AppController(None, tmp_path / "logs", theme="light", command=[sys.executable, "-c", SERVER])
    controller.start(show=True)
    qtbot.waitUntil(lambda: controller.supervisor.status().pid is not None, timeout=60_000)
    log = tmp_path / "logs" / "server.log"
    qtbot.waitUntil(lambda: log.is_file() and "ready" in log.read_text(), timeout=60_000)
    shown: list[str] = []
    controller.quit()
    assert controller.supervisor.status().pid is not None      # returned at once: the server is still stopping

    def seen():
        text = controller.status_label.text()
        if not shown or shown[-1] != text:
            shown.append(text)
        return "1.0 of 2.0 MiB written" in text
    qtbot.waitUntil(seen, timeout=60_000)
    qtbot.waitUntil(lambda: controller._shut, timeout=60_000)
    assert controller.supervisor.status().state == "stopped"
    assert "Server stopping: keeping 2 conversations for the next start (1.0 of 2.0 MiB written)" in shown, shown


def test_the_status_bar_says_a_progress_line_once():
    st = ServerStatus("stopping", "stopping: keeping 1 conversation for the next start (3 of 5 written)", None, 7, 0, "")
    assert status_text(st) == "Server stopping: keeping 1 conversation for the next start (3 of 5 written)"
    st = ServerStatus("stopping", "stopping the server (it parks its conversations first)", None, 7, 0, "")
    assert status_text(st) == "Server stopping: stopping the server (it parks its conversations first)"


def test_a_restart_asked_for_while_quitting_starts_no_server(qtbot, tmp_path):
    """The tray's Restart (or 'Start on a free port') clicked during Quit's stop: it restarted the server, which
    loaded its model only to be stopped again by the shutdown, with the window frozen for that second stop."""
    starts = tmp_path / "starts"
    server = f"open({str(starts)!r}, 'a').write('s\\n')\n" + SERVER
    controller = AppController(None, tmp_path / "logs", theme="light", command=[sys.executable, "-c", server])
    controller.start(show=True)
    log = tmp_path / "logs" / "server.log"
    qtbot.waitUntil(lambda: log.is_file() and "ready" in log.read_text(), timeout=60_000)
    controller.quit()
    controller.restart_server()
    controller.restart_on_free_port()
    qtbot.waitUntil(lambda: controller._shut, timeout=60_000)
    assert starts.read_text().count("s") == 1
    assert not controller.supervisor.on_free_port
