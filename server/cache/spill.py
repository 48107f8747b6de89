"""The asynchronous spill writer: one thread that writes disk-bound captures, in order.

What this is: a queue and a daemon thread (started on first use) that calls `write_one(key)` for
each key submitted, or runs a job (`submit_job(fn)`: the prefix saves of the segment tier and the
system-prompt cache); `flush()` waits until the queue is empty, `stop()` ends the thread. What this is
not: the writes themselves (ConversationCache._spill_one / _write_prefix decide room, write, index
and count).
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
        self._stopped = False   # after stop(), nothing is taken (the cache closed; a park may still end after it)

    def submit(self, key: str) -> None:
        self._put(key)

    def submit_job(self, job: Callable[[], None]) -> None:
        self._put(job)

    def _put(self, item: str | Callable[[], None]) -> None:
        with self._start_lock:
            if self._stopped:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="strata-cache-spill", daemon=True)
                self._thread.start()
        self._q.put(item)

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                if callable(item):
                    item()
                else:
                    self._write_one(item)
            except Exception:  # the writer must survive any one failure
                log.exception("spill of %s failed", item)
            finally:
                self._q.task_done()

    def flush(self, progress: Callable[[int, int], None] | None = None, poll_s: float = 0.2) -> None:
        """Wait until every queued spill is written; `progress(done, queued)` whenever one more is (a stop waits
        here for the captures parked to disk: the app reads how far it is)."""
        if self._thread is None:
            return
        if progress is None:
            self._q.join()
            return
        queued = left = self._q.unfinished_tasks
        while left:
            progress(queued - left, queued)
            while self._q.unfinished_tasks == left:
                with self._q.all_tasks_done:   # notified when the count falls to 0; polled for each step
                    self._q.all_tasks_done.wait(poll_s)
            left = self._q.unfinished_tasks
            queued = max(queued, left)
        if queued:
            progress(queued, queued)   # the last word: all written (a stop's last line said "0 of 3 written")

    def stop(self, timeout: float = 30.0) -> None:
        with self._start_lock:
            self._stopped = True
        if self._thread is not None:
            self._q.put(None)
            self._thread.join(timeout=timeout)
