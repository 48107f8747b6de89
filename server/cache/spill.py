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
from collections import Counter
from collections.abc import Callable, Collection

log = logging.getLogger("strata.cache")


class SpillWriter:
    def __init__(self, write_one: Callable[[str], int | bool | None]) -> None:
        """`write_one(key)`: the bytes written once written, False when every level refused it (lost), None when
        there was nothing to write or it was kept elsewhere (RAM): a stop's lines count only the first as written."""
        self._write_one = write_one
        self._q: queue.Queue = queue.Queue()
        # a flush reads these at one moment; keys only: a job (a prefix save of the segment tier or the system-prompt
        # cache) is no conversation (a stop counted each one beside the histories: "2 of 2 written" for one history)
        self._count_lock = threading.Lock()
        self._keys_left = 0   # keys queued, not yet taken
        self._queued: Counter[str] = Counter()   # those keys (leave_out leaves out only these)
        self._keys_done = 0   # keys taken, ever
        self.refused = 0      # keys written nowhere: lost
        self.not_kept = 0     # keys with nothing written (gone from the queue's entries, kept in RAM instead)
        self._counted: dict[str, int] | None = None   # a flush's: the keys it counts written, their bytes
        self._mark: tuple[int, int, int] | None = None   # a stop's start (keys done, refused, not kept): see mark
        self._left_out: set[str] = set()   # queued keys a stop's plan leaves unwritten, not yet taken: see leave_out
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stopped = False   # after stop(), nothing is taken (the cache closed; a park may still end after it)
        # cleared while a stop queues its histories (hold / release): which to write is decided on the whole queue
        self._open = threading.Event()
        self._open.set()

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
        if isinstance(item, str):
            with self._count_lock:
                self._keys_left += 1
                self._queued[item] += 1
        self._q.put(item)

    def hold(self) -> None:
        """Write nothing more (one under way ends) until `release`: a stop queues all its histories first."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def mark(self, written: dict[str, int]) -> None:
        """A stop's queue begins (cache.stop_writes): the flush with progress that ends it counts the keys taken from
        here on, not only those taken once it has begun (the close comes later: the writer may have written some of
        the queue, or all of it, meanwhile; its lines left those out). `written` is filled from here on, as a
        flush's is. The first mark holds until that flush (or `unmark`)."""
        with self._count_lock:
            if self._mark is None:
                self._mark = (self._keys_done, self.refused, self.not_kept)
                self._counted = written

    def leave_out(self, keys: Collection[str]) -> None:
        """Queued `keys` a stop's plan leaves unwritten (cache.stop_writes): a flush's lines leave them out of what
        stays from its first line. Counted only as each was taken at its turn, a stop said "keeping 3 conversations
        ... (0 of 3 written)" and then "keeping 1 ... (1 of 1 written)" (session 39's soak: 3 of 4 left out). One
        written after all at its turn (the plan given up on a failed write) counts as written when taken. One taken
        already (the plan is worked out while the writer may take the key it had begun on) is counted by its outcome:
        left out as well, it was subtracted twice, N one short until the flush ended."""
        with self._count_lock:
            self._left_out = {k for k in keys if self._queued[k]}

    def unmark(self) -> None:
        with self._count_lock:
            self._mark, self._counted = None, None

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            outcome: int | bool | None = None
            try:
                if item is None:
                    return
                self._open.wait()
                if callable(item):
                    item()
                else:
                    outcome = self._write_one(item)
            except Exception:  # the writer must survive any one failure
                log.exception("spill of %s failed", item)
                outcome = False
            finally:
                with self._count_lock:
                    if isinstance(item, str):
                        self._count(item, outcome)
                    self._q.task_done()

    def _count(self, key: str, outcome: int | bool | None) -> None:
        """One key taken off the queue (the count lock held)."""
        self._keys_left -= 1
        self._keys_done += 1
        self._queued[key] -= 1
        if not self._queued[key]:
            del self._queued[key]
        self._left_out.discard(key)   # taken: its outcome counts it now
        self._count_outcome(key, outcome)

    def recount(self, key: str, outcome: int | bool | None) -> None:
        """A key counted not kept at its turn (a stop's history held unwritten) was written after all, or refused:
        counted again by what became of it, so that a stop's lines count what the next start finds."""
        with self._count_lock:
            self.not_kept -= 1
            self._count_outcome(key, outcome)

    def _count_outcome(self, key: str, outcome: int | bool | None) -> None:
        self.refused += outcome is False
        self.not_kept += outcome is None
        if self._counted is not None and outcome is not None and not isinstance(outcome, bool):
            self._counted[key] = outcome

    def flush(self, progress: Callable[[int, int, int], None] | None = None, poll_s: float = 0.2,
              written: dict[str, int] | None = None) -> None:
        """Wait until every queued spill and job is done; `progress(written, kept, refused)` as each is (a stop waits
        here for the captures parked to disk: the app reads how far it is, and ends a stop silent for 15 s). `kept`:
        the histories queued that are or will be written; one refused by every level leaves it for `refused` (the
        trial's stop said "3 of 3 written" with one of them refused, lost), one kept in RAM instead leaves it (the
        stop writes RAM after); (0, 0, 0) while only jobs are left. `written`: filled with the keys counted written
        and their bytes, each before it is counted (a stop tells which of them a later write evicted). After a
        `mark`, the counts (and `written`) start there. Without `progress`, a wait only (a mark holds)."""
        if self._thread is None:
            return
        if progress is None:
            self._q.join()
            return
        with self._count_lock:
            done0, refused0, not_kept0 = self._mark or (self._keys_done, self.refused, self.not_kept)
            if written is not None and self._counted is not None and written is not self._counted:
                written.update(self._counted)   # what the mark's dict got before this flush
            self._mark, self._counted = None, written
        try:
            self._wait(progress, poll_s, done0, refused0, not_kept0)
        finally:
            with self._count_lock:
                self._counted = None

    def _wait(self, progress: Callable[[int, int, int], None], poll_s: float, done0: int, refused0: int,
              not_kept0: int) -> None:
        took = 0   # keys taken during this flush
        while True:
            with self._count_lock:
                tasks, took = self._q.unfinished_tasks, self._keys_done - done0
                left = self._keys_left - len(self._left_out)   # those the plan writes
                gone = self.refused - refused0 + self.not_kept - not_kept0   # taken, nothing of them kept here
                refused = self.refused - refused0
            if not tasks:
                break
            progress(took - gone, took + left - gone, refused)
            while self._q.unfinished_tasks == tasks:
                with self._q.all_tasks_done:   # notified when the count falls to 0; polled for each step
                    self._q.all_tasks_done.wait(poll_s)
        if took:
            # the last word: all written (a stop's last line said "0 of 3 written"), but for those refused
            progress(took - gone, took - gone, refused)

    def stop(self, timeout: float = 30.0) -> None:
        with self._start_lock:
            self._stopped = True
        self._open.set()   # a hold left on would keep the thread from its end
        if self._thread is not None:
            self._q.put(None)
            self._thread.join(timeout=timeout)
