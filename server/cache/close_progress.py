"""close()'s progress callback, told between histories and as each write of one is made.

What this is: the adapter between ConversationCache.close and its `progress(entries done, entries, bytes done,
bytes)` callback (server/stop_progress.py logs it), fed by FileIO.on_write as pieces are written. The app ends a
stop that has said nothing for 15 s; one history of a big model (Qwen3-Coder-30B at 128K tokens: ~12 GiB, ~37 s
at 339 MiB/s) takes longer than that, so a line only between histories made its stop look stalled. A write that
hangs still makes no call. What this is not: the lines' wording or rate (stop_progress.py), the writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Progress = Callable[..., None]   # (done, n, bytes done, bytes[, refused[, evicted]]): the extras given only when some were


class CloseProgress:
    """`entry(...)` before each history (and once after the last); `wrote(n)` from whichever thread writes
    (the spill writer while its queue drains, the stopping thread after): calls are serialised.

    The lines speak for the whole stop: the spill writer's queue is drained first (`queued`, counted in entries),
    then RAM's histories are handed down (`entry`, in bytes), and those lines add what the queue wrote. N counts
    what stays: a history this stop wrote that a later write of it evicted for a disk budget leaves N and is said
    apart (session 31's soak: "6 of 6 written" while the levels kept 5); one a longer copy written after it
    superseded leaves N and the written, its conversation counted once."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self._lock = threading.Lock()
        self._at = (0, 0, -1, -1)       # (done, n, bytes done, bytes); sizes -1: not known (counted in entries)
        self._began = False
        self._size = 0                   # the history being written: its bytes, the most its writes count
        self._written = 0
        self._refused = 0                # histories every disk level refused (lost): not among the n kept
        self.queue_written: dict[str, int] = {}   # the queue's histories written at this stop, their bytes (filled
        #                                           by SpillWriter.flush before each is counted)
        self._handed: set[str] = set()   # RAM's written at this stop
        self._gone: set[str] = set()     # the queue's written ones since gone from the disk levels
        self._evicted = 0                # of both, evicted for a disk budget by a later write
        self._merged = 0                 # of both, superseded by a longer copy
        self._before = (0, 0, 0)         # the queue's (written, bytes, refused), added to the hand-down's lines

    def entry(self, n_done: int, n: int, bytes_done: int = -1, n_bytes: int = -1, size: int = 0,
              refused: int = 0) -> None:
        with self._lock:
            self._at, self._size, self._written, self._refused = (n_done, n, bytes_done, n_bytes), size, 0, refused
            self._began = True
            self._tell(*self._at)

    def queued(self, written: int, kept: int, refused: int) -> None:
        """The spill writer's queue (SpillWriter.flush): its sizes are not known, counted in entries."""
        self.entry(written, kept, refused=refused)

    def handing_down(self) -> None:
        """The queue is drained: the hand-down's lines add what it wrote (its bytes known now)."""
        with self._lock:
            self._before = (len(self.queue_written), sum(self.queue_written.values()), self._refused)
            self._refused = 0

    def handed_down(self, key: str) -> None:
        """RAM's `key` was written (caller: the stopping thread, the cache's lock held)."""
        with self._lock:
            self._handed.add(key)

    def left(self, key: str, evicted: bool) -> None:
        """`key` left the disk levels (the cache's lock held: a cascade event): `evicted` for a budget, else
        superseded or discarded. Counted when this stop wrote it; told with the next line."""
        with self._lock:
            if key in self._handed:
                self._handed.discard(key)
            elif key in self.queue_written and key not in self._gone:
                self._gone.add(key)
            else:
                return
            if evicted:
                self._evicted += 1
            else:
                self._merged += 1

    def _tell(self, done: int, n: int, bytes_done: int, n_bytes: int) -> None:
        w, b, r = self._before
        done, n, refused = done + w - self._merged, n + w - self._merged - self._evicted, self._refused + r
        if bytes_done >= 0:
            bytes_done, n_bytes = bytes_done + b, n_bytes + b
        extra = (refused, self._evicted) if self._evicted else (refused,) if refused else ()
        self.progress(done, n, bytes_done, n_bytes, *extra)

    def wrote(self, n_bytes: int) -> None:
        with self._lock:
            done, n, bytes_done, total = self._at
            if not self._began:
                return                   # nothing being kept yet (a write before the first line)
            self._written = min(self._written + n_bytes, self._size)
            self._tell(done, n, bytes_done + self._written if bytes_done >= 0 else bytes_done, total)
