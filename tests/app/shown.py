"""What the app's window shows, sampled: its status bar and its header, with the supervisor's state, polled every
5 ms in the app's timer's place. The timer's 300 ms (and the window's repaints between) missed states shown for a
fraction of a second; the supervisor runs on its own threads, so the app's poll needs no event loop meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    state: str        # the supervisor's
    status: str       # the status bar's text
    header: str       # what the monitor's header says: its connection and detail (drawn at its next redraw)


def follow(controller, until: Callable[[Sample], bool], timeout_s: float = 60.0,
           shown: list[Sample] | None = None) -> list[Sample]:
    """Every change of what the window shows, until `until` holds for one (appended to `shown` when given); the
    window is then laid out and drawn with it once (for a grab). The app's own timer is off while it runs: the
    caller starts it again (`controller.timer.start()`) to let the app go on alone."""
    from PySide6.QtWidgets import QApplication

    controller.timer.stop()
    shown = [] if shown is None else shown
    deadline = time.monotonic() + timeout_s
    while True:
        controller.poll()
        view = controller.model.view()
        now = Sample(controller.supervisor.status().state, controller.status_label.text(),
                     f"{view.connection} {view.connection_detail}")
        if not shown or shown[-1] != now:
            shown.append(now)
        if until(now):
            break
        assert time.monotonic() < deadline, shown
        time.sleep(0.005)
    QApplication.processEvents()
    return shown


def runs(samples: list[Sample]) -> list[str]:
    """The states in the order shown, each run of one state once."""
    out: list[str] = []
    for s in samples:
        if not out or out[-1] != s.state:
            out.append(s.state)
    return out
