"""One look at a file made on a thread of its own, for the GUI thread to poll: a model file on a network share that
does not answer (or a slow disk) held the window for as long as its stat() did.

Qt-free. What it is not: the supervisor's looks before a start (supervisor._looking_at), which a start waits for.
The thread is a daemon: a look that never returns neither holds the app's end nor is ever joined.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BackgroundLook(Generic[T]):
    """`look()` run once on a daemon thread named `name`; `begun` is its wall time, only to be shown ("begun at
    HH:MM:SS"): how long it has taken is `waited_s()`, on the monotonic clock, which a wall-clock step (this VM's
    25 s in a CI run, an NTP correction) does not move."""

    def __init__(self, look: Callable[[], T], name: str = "strata-look") -> None:
        self.begun = time.time()
        self._began = time.monotonic()
        self._look = look
        self._result: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = self._look()
        except Exception as e:      # handed to the poller by result(), not lost on this thread
            self._error = e

    def waited_s(self) -> float:
        return time.monotonic() - self._began

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self) -> T | None:
        """The look's value once done (the precondition: `done()`); its exception raised again."""
        if not self.done():
            raise RuntimeError("the look has not ended")
        if self._error is not None:
            raise self._error
        return self._result
