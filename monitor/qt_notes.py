"""Qt's notes about what its offscreen platform cannot do, kept off the user's terminal.

The offscreen plugin (how `strata monitor --screenshot` renders without a display, and how the tests run
the app) answers a window's size hints and raise() with 'This plugin does not support ...' on stderr: a
line under the saved-picture line of every screenshot, saying nothing about Strata. `quiet_offscreen_notes`
drops exactly those; every other Qt message is still written to stderr as Qt writes it.
"""

from __future__ import annotations

import sys

OFFSCREEN_NOTE = "This plugin does not support "


def is_offscreen_note(message: str) -> bool:
    return message.startswith(OFFSCREEN_NOTE)


def quiet_offscreen_notes(app) -> None:
    """On the offscreen platform only: install a message handler that drops its notes, passes the rest."""
    if app.platformName() != "offscreen":
        return
    from PySide6.QtCore import qFormatLogMessage, qInstallMessageHandler

    def handler(kind, context, message: str) -> None:
        if not is_offscreen_note(message):
            print(qFormatLogMessage(kind, context, message), file=sys.stderr, flush=True)

    qInstallMessageHandler(handler)
