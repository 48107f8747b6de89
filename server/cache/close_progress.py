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

Progress = Callable[..., None]   # (done, n, bytes done, bytes[, refused]): refused given only when some were


class CloseProgress:
    """`entry(...)` before each history (and once after the last); `wrote(n)` from whichever thread writes
    (the spill writer while its queue drains, the stopping thread after): calls are serialised."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self._lock = threading.Lock()
        self._at = (0, 0, -1, -1)       # (done, n, bytes done, bytes); sizes -1: not known (counted in entries)
        self._size = 0                   # the history being written: its bytes, the most its writes count
        self._written = 0
        self._refused = 0                # histories every disk level refused (lost): not among the n kept

    def entry(self, n_done: int, n: int, bytes_done: int = -1, n_bytes: int = -1, size: int = 0,
              refused: int = 0) -> None:
        with self._lock:
            self._at, self._size, self._written, self._refused = (n_done, n, bytes_done, n_bytes), size, 0, refused
            self._tell(*self._at)

    def queued(self, written: int, kept: int, refused: int) -> None:
        """The spill writer's queue (SpillWriter.flush): its sizes are not known, counted in entries."""
        self.entry(written, kept, refused=refused)

    def _tell(self, *at: int) -> None:
        if self._refused:
            self.progress(*at, self._refused)
        else:
            self.progress(*at)

    def wrote(self, n_bytes: int) -> None:
        with self._lock:
            done, n, bytes_done, total = self._at
            if n == 0:
                return                   # nothing being kept yet (a write before the first history's line)
            self._written = min(self._written + n_bytes, self._size)
            self._tell(done, n, bytes_done + self._written if bytes_done >= 0 else bytes_done, total)
