"""The tray menu follows the server's state (offscreen: the icon is built even where no tray shows)."""

from __future__ import annotations

from PySide6.QtGui import QIcon
from strata.app.controller import status_text
from strata.app.supervisor import ServerStatus
from strata.app.tray import Tray


def test_tray_menu_follows_the_state(qapp):
    calls = []
    tray = Tray(QIcon(), on_open=lambda: calls.append("open"), on_copy=lambda: calls.append("copy"),
                on_restart=lambda: calls.append("restart"), on_quit=lambda: calls.append("quit"))
    try:
        tray.show_status(ServerStatus("starting", "starting the server", None, None, 0, ""))
        assert tray.state_action.text() == "Server: starting"
        assert not tray.endpoint_action.isEnabled()
        # the model loading: the menu counts the load, as the status bar does (it said "Server: starting" all along)
        tray.show_status(ServerStatus("starting", "loading the model", "http://127.0.0.1:8080", 42, 0, "", loading_s=42.6))
        assert tray.state_action.text() == "Server: loading the model (42 s so far)"
        assert tray.icon.toolTip() == "Strata \u2014 starting\nhttp://127.0.0.1:8080\nloading the model"
        up = ServerStatus("running", "pid 42", "http://127.0.0.1:8080", 42, 1, "server killed by SIGKILL; restart 1 of 5")
        tray.show_status(up)
        assert tray.state_action.text() == "Server: running"
        assert tray.endpoint_action.isEnabled() and "http://127.0.0.1:8080" in tray.endpoint_action.text()
        assert tray.icon.toolTip() == "Strata \u2014 running\nhttp://127.0.0.1:8080"
        for action in (tray.endpoint_action, tray.open_action, tray.restart_action, tray.quit_action):
            action.trigger()
        assert calls == ["copy", "open", "restart", "quit"]
    finally:
        tray.hide()


def test_status_text():
    assert status_text(ServerStatus("running", "pid 7", "http://h:1", 7, 0, "")) == "Server running (pid 7)"
    text = status_text(ServerStatus("running", "pid 9", "http://h:1", 9, 2, "server killed by SIGKILL; restart 1 of 5"))
    assert text == "Server running (pid 9)  \u2022  restarted 2 times (last: server killed by SIGKILL; restart 1 of 5)"
    assert status_text(ServerStatus("failed", "refused", None, None, 5, "x")).startswith("Server failed: refused")
    # while it waits to start again the reason is said once (it was said twice, as the state and as "last")
    why = "server killed by SIGKILL; restart 1 of 5"
    assert status_text(ServerStatus("restarting", why, None, None, 1, why)) == f"Server restarting: {why}"
    # a give-up counts the restarts and says the last reason: the status bar's one line said it all twice
    gave_up = "gave up after 5 restarts in a row: server exited with status 1 (boom) (STRATA_START_RETRIES=5)"
    last = "server exited with status 1 (boom); restart 5 of 5"
    assert status_text(ServerStatus("failed", gave_up, None, None, 5, last)) == f"Server failed: {gave_up}"
    # a failure of another kind after restarts still says them
    other = "the server could not load its model: exited with status 3 (damaged)"
    assert status_text(ServerStatus("failed", other, None, None, 1, why)).endswith(f"restarted once (last: {why})")
