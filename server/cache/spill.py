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
    def __init__(self, write_one: Callable[[str], bool | None]) -> None:
        """`write_one(key)`: True once written, False when every level refused it (lost), None when there was
        nothing to write or it was kept elsewhere (RAM): a stop's lines count only the first as written."""
        self._write_one = write_one
        self._q: queue.Queue = queue.Queue()
        self._count_lock = threading.Lock()   # a flush reads the queue's size and these counts at one moment
        self.refused = 0      # keys written nowhere: lost
        self.not_kept = 0     # keys with nothing written (gone from the queue's entries, kept in RAM instead)
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
            outcome: bool | None = True
            try:
                if item is None:
                    return
                if callable(item):
                    item()
                else:
                    outcome = self._write_one(item)
            except Exception:  # the writer must survive any one failure
                log.exception("spill of %s failed", item)
                outcome = False
            finally:
                with self._count_lock:
                    self.refused += outcome is False
                    self.not_kept += outcome is None
                    self._q.task_done()

    def flush(self, progress: Callable[[int, int, int], None] | None = None, poll_s: float = 0.2) -> None:
        """Wait until every queued spill is written; `progress(written, kept, refused)` whenever one more is done (a
        stop waits here for the captures parked to disk: the app reads how far it is). `kept`: those queued that
        are or will be written; one refused by every level leaves it for `refused` (the trial's stop said "3 of 3
        written" with one of them refused, lost), one kept in RAM instead leaves it (the stop writes RAM after)."""
        if self._thread is None:
            return
        if progress is None:
            self._q.join()
            return
        with self._count_lock:
            queued = left = self._q.unfinished_tasks
            refused0, not_kept0 = self.refused, self.not_kept
        refused = not_kept = 0
        while left:
            progress(queued - left - refused - not_kept, queued - refused - not_kept, refused)
            while self._q.unfinished_tasks == left:
                with self._q.all_tasks_done:   # notified when the count falls to 0; polled for each step
                    self._q.all_tasks_done.wait(poll_s)
            with self._count_lock:
                left = self._q.unfinished_tasks
                refused, not_kept = self.refused - refused0, self.not_kept - not_kept0
            queued = max(queued, left)
        if queued:
            # the last word: all written (a stop's last line said "0 of 3 written"), but for those refused
            kept = queued - refused - not_kept
            progress(kept, kept, refused)

    def stop(self, timeout: float = 30.0) -> None:
        with self._start_lock:
            self._stopped = True
        if self._thread is not None:
            self._q.put(None)
            self._thread.join(timeout=timeout)
