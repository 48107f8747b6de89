"""--status-line's escapes (erase the line) only where the terminal shows them: a Windows console shows them once
its virtual-terminal mode is on, which strata/terminal_escapes.py turns on; where it cannot, the status line is
left out and the log lines have no escapes ('←[2K' before each). The console API cannot run here: the platform
is set to win32 and the mode's answer given, around the real check on a real terminal (a pty). Not here: what
the status line says (test_auth_and_lifecycle.py)."""

from __future__ import annotations

import os
import sys

import pytest
from strata.server import cli
from strata.server.config import load_config

from strata import terminal_escapes


@pytest.fixture
def terminal():
    """A real terminal (a pty) to be standard error; set in the test itself, as pytest sets its own between."""
    controller, end = os.openpty()
    stream = open(end, "w", encoding="utf-8")
    yield stream
    stream.close()
    os.close(controller)


@pytest.mark.parametrize("platform,mode_on,shown", [
    ("linux", None, True),          # never asks
    ("darwin", None, True),
    ("win32", True, True),          # Windows Terminal, or a console whose mode was turned on
    ("win32", False, False),        # an older console: no escapes
])
def test_the_status_line_is_shown_where_its_escapes_are(monkeypatch, terminal, platform, mode_on, shown):
    asked = []

    def mode(fd: int) -> bool:
        asked.append(fd)
        if mode_on is None:
            raise AssertionError("the console mode is asked on Windows only")
        return mode_on
    monkeypatch.setattr(terminal_escapes, "virtual_terminal_on", mode)
    config = load_config({"status_line": True}, environ={})
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(sys, "platform", platform)
    try:
        on = cli.status_line_shown(config)
    finally:
        monkeypatch.undo()
    assert on is shown
    assert asked == ([terminal.fileno()] if platform == "win32" else [])
    assert ("\x1b[2K" in cli.log_format(on)) is shown


def test_a_console_api_failure_means_no_escapes():
    def refused(fd: int) -> bool:
        raise OSError(6, "The handle is invalid")
    assert terminal_escapes.escapes_shown(2, "win32", refused) is False
    assert terminal_escapes.escapes_shown(2, "linux", refused) is True
