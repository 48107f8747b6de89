"""This process's hold of a folder's commit lock: its threads take turns here before the file lock is tried.

What this is: one hold per folder (a holder's name under a `threading.Condition`) for the whole process (every FileIO, every cache in it), taken by
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
    """The state of one folder's in-process lock, all of it read and written under `turn` (so a waiter that gives up
    reads one hold's holder, since and waiting, never a mix or a hold not yet recorded): the hold is `holder` set.
    `waiting` alone is set unlocked, by the holder, of its own hold. `given_up_on` is the hold number a wait gave up on."""

    turn: threading.Condition = field(default_factory=threading.Condition)   # notified when a hold ends
    holds: int = 0                      # holds had so far: the current one's number while held
    holder: str | None = None           # the holding thread's name; None: free
    since: float = 0.0                  # when it was had (the clock `held` was given)
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
    me = threading.current_thread().name
    began, had = clock(), False
    while True:
        now = clock()   # read before the turn is taken: a clock never runs while the hold's state is locked
        with hold.turn:
            if hold.holder is None:
                hold.holds += 1
                hold.holder, hold.since, hold.waiting, hold.given_up_on = me, now, False, None
                had = True
                break
            stuck = hold.given_up_on == hold.holds
            if stuck or now - began >= wait_s:
                holder, since, waiting = hold.holder, hold.since, hold.waiting   # one hold's, as it is now
                if not waiting and not stuck:
                    hold.given_up_on = hold.holds
                break
            hold.turn.wait(wait_s - (now - began))   # woken when a hold ends, or at the deadline (real time: a
            # `clock` given for a test must advance with it, or the wait is renewed)
    if not had:
        if waiting:   # the holder itself waits for another process: that one is what holds the folder
            raise CommitLockHeld(errno.EAGAIN, f"its commit lock is held by another process (this server's thread "
                                               f"{holder!r} has waited for it for {now - since:.1f} s)")
        raise CommitLockHeld(errno.EAGAIN, f"its commit lock has been held by this server's thread {holder!r} for "
                                           f"{now - since:.1f} s (waited {now - began:.1f} s; a file "
                                           "operation there that has hung?)")
    try:
        yield hold
    finally:
        with hold.turn:
            hold.holder, hold.waiting = None, False
            hold.turn.notify()
