"""A second launch's wait for an app that is quitting: a small window says so (a launch from a desktop icon
has no terminal to print to) and closes once that app has ended; Cancel gives up. Qt only; the asking is
single_instance.py's.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QProgressDialog
from strata.app.single_instance import QUIT_POLL_S, QUIT_WAIT_S, ask_later

TEXT = ("The running Strata is quitting: it keeps its conversations on disk first.\n"
        "This one starts when it has ended.")


def wait_for_quitting_app(name: str, limit_s: float = QUIT_WAIT_S, poll_s: float = QUIT_POLL_S) -> str | None:
    """Shows the wait while the app under `name` says it is quitting; returns its last answer (None: it has
    ended; "quitting": still after `limit_s`), or "cancelled" when the user gave up."""
    dialog = QProgressDialog(TEXT, "Cancel", 0, 0)       # 0..0: a busy bar, no percentage to make up
    dialog.setWindowTitle("Strata")
    dialog.setMinimumDuration(0)
    deadline = time.monotonic() + limit_s
    answer: list[str | None] = ["cancelled"]
    asking: list = []     # the question in flight (its socket lives until the dialog ends)

    def heard(now: str | None) -> None:
        if dialog.wasCanceled():
            return
        if now != "quitting" or time.monotonic() >= deadline:
            answer[0] = now
            dialog.reset()             # closes it; exec() returns
        else:
            timer.start()

    def poll() -> None:
        # not blocking: the window stays drawn and Cancel answers while a busy app is slow to reply; its
        # silence means it is still there and on its way out (it said so), not that it came forward
        asking[:] = [ask_later(name, heard, silence="quitting")]
    timer = QTimer(dialog)
    timer.setSingleShot(True)
    timer.setInterval(round(poll_s * 1000))
    timer.timeout.connect(poll)
    timer.start()
    dialog.canceled.connect(timer.stop)
    dialog.exec()
    return answer[0]
