"""This process's hold of a folder's commit lock: its threads take turns here before the file lock is tried.

What this is: one `threading.Lock` per folder for the whole process (every FileIO, every cache in it), taken by
`FileIO.commit_lock` before it opens the folder for the file lock and released after that descriptor is closed, so
the file lock only arbitrates between processes. Without it a thread waited for another thread of its own server
as for a hung process: on Linux flock is per open file description, so two threads' descriptors excluded each other
and the second polled (1 to 50 ms apart), gave up at COMMIT_LOCK_WAIT_S saying "held by another process" and made
the folder's every try for the next 60 s fail at once without waiting; Windows' LockFileEx is per handle, the same;
where flock is emulated by POSIX record locks (NFS) or fcntl is used, a lock is the process's: a second thread
"had" it while the first held it, and the close of any descriptor of the folder let it go. A wait here ends at its
deadline too (a hung holder: a rename on a network folder gone) with CommitLockHeld naming the thread; while that
same hold lasts, the next waits give up at once. What this is not: the lock between processes (fileio.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass(eq=False)
class FolderHold:
    """The state of one folder's in-process lock. `holder`, `since`, `waiting` describe the hold under way (read
    unlocked by a waiter, for its message only); `given_up_on` is the hold number a wait gave up on."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    holds: int = 0                      # holds had so far: the current one's number while held
    holder: str | None = None           # the holding thread's name
    since: float = 0.0                  # when it was had (time.monotonic)
    waiting: bool = False               # the holder is still waiting for another process's file lock
    given_up_on: int | None = None      # a wait gave up on this hold: the next ones do not wait while it lasts


_holds: dict[str, FolderHold] = {}
_holds_lock = threading.Lock()


def hold_of(folder: str) -> FolderHold:
    """The process's one FolderHold of `folder` (however it is spelled: a link, a case, `..` resolved)."""
    key = os.path.normcase(os.path.realpath(folder))
    with _holds_lock:
        return _holds.setdefault(key, FolderHold())


class CommitLockHeld(OSError):
    """A folder's commit lock was not had in time: another process holds it, or another thread of this one. What
    needed it is given up, never done unlocked: a write fails as any OSError does (counted, warned once a run), a
    removal is left (an eviction's entry stays, warned once a run; the start's removals of damaged and orphaned
    files are left for a later one). fileio.py re-exports it."""


@contextlib.contextmanager
def held(folder: str, wait_s: float, clock: Callable[[], float] = time.monotonic) -> Iterator[FolderHold]:
    """Hold `folder`'s in-process lock, waiting at most `wait_s` for another thread of this process (not at all
    while a wait already gave up on the hold under way); CommitLockHeld (errno EAGAIN) past it, naming the holder.
    Yields the hold (the caller marks `waiting` while it waits for the file lock)."""
    hold = hold_of(folder)
    began = clock()
    stuck = hold.given_up_on is not None and hold.given_up_on == hold.holds
    got = hold.lock.acquire(timeout=0 if stuck else wait_s)
    holder, since, waiting, number = hold.holder, hold.since, hold.waiting, hold.holds
    if not got and holder is None:   # let go between the wait's end and the look: had now, or taken by another
        got = hold.lock.acquire(blocking=False)
    if not got:
        if waiting:   # the holder itself waits for another process: that one is what holds the folder
            raise CommitLockHeld(errno.EAGAIN, f"its commit lock is held by another process (this server's thread "
                                               f"{holder!r} has waited for it for {clock() - since:.1f} s)")
        if not stuck:
            hold.given_up_on = number
        raise CommitLockHeld(errno.EAGAIN, f"its commit lock has been held by this server's thread {holder!r} for "
                                           f"{clock() - since:.1f} s (waited {clock() - began:.1f} s; a file "
                                           "operation there that has hung?)")
    hold.holds += 1
    hold.holder, hold.since, hold.waiting, hold.given_up_on = threading.current_thread().name, clock(), False, None
    try:
        yield hold
    finally:
        hold.holder, hold.waiting = None, False
        hold.lock.release()
