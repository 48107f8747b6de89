"""The asynchronous spill writer: one thread that writes disk-bound captures, in order.

What this is: a queue of keys and a daemon thread (started on first use) that calls `write_one(key)`
for each; `flush()` waits until the queue is empty, `stop()` ends the thread. What this is not: the
write itself (ConversationCache._spill_one decides room, writes, indexes and counts).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("strata.cache")


class SpillWriter:
    def __init__(self, write_one: Callable[[str], None]) -> None:
        self._write_one = write_one
        self._q: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, key: str) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="strata-cache-spill", daemon=True)
                self._thread.start()
        self._q.put(key)

    def _loop(self) -> None:
        while True:
            key = self._q.get()
            try:
                if key is None:
                    return
                self._write_one(key)
            except Exception:  # the writer must survive any one failure
                log.exception("spill of %s failed", key)
            finally:
                self._q.task_done()

    def flush(self) -> None:
        """Wait until every queued spill is written."""
        if self._thread is not None:
            self._q.join()

    def stop(self, timeout: float = 30.0) -> None:
        if self._thread is not None:
            self._q.put(None)
            self._thread.join(timeout=timeout)
