"""Whether a cache folder's file system keeps this clock's time, and which clocks ahead of it have a live server there.

What this is: at start-up a cache makes a file in each disk folder it uses,
`.strata-clock-<clock id>.<host>-<pid>-<random>.live`, and reads the time the file system stamped on it (on a network
folder, the file server's clock): `fs_offset_s`, that time minus this cache's clock. Where this clock is ahead of
the file system's by more than `slack_s`, the files it seals will look far ahead to a server whose clock agrees with
the file system, and that server could take their seals over; so the file is kept, locked (flock; Windows: its first
byte) for as long as the cache is open, the lock going with the process however it ends, and removed by a clean
close: its presence. Otherwise it is removed at once (a clock that agrees with the file system seals nothing far
ahead of one that does; one behind it seals nothing ahead). `live_clocks` names the clocks whose presence files are
locked now (an unlocked one was left by a server that died: removed). Both under the folder's commit lock, so a
server starting meanwhile is seen, never caught between making its file and locking it.

Why: a start may take over the seal of a file another clock sealed far ahead (ConversationCache._reseal_far_ahead,
steady_clock.may_adopt) only where the file system's clock agrees with its own and no server whose clock is ahead
uses the folder (whatever clock the file names: its own older files name none or its host's earlier name); else the clock behind may be its own, and rewritten, the other server's files would look a year old to it
(aad0950). What this is not: that decision, or the commit lock itself (fileio.py, folder_holds.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from strata import folders

from .fileio import LOCK_HELD_ERRNOS, FileIO
from .steady_clock import FS_CLOCK_SLACK_S
from .temp_files import HOST

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

log = logging.getLogger("strata.cache")
PREFIX, SUFFIX = ".strata-clock-", ".live"   # no entry prefix: never indexed, never counted as a skipped file
_NAME = re.compile(r"^\.strata-clock-(?P<clock>[A-Za-z0-9_-]+)\.[^.]+\.live$")


@dataclass(eq=False)
class Presence:
    """This cache's presence file in `folder`, held locked through `fd` until `close()`."""

    folder: str
    clock: str
    path: str
    fd: int
    fs_offset_s: float   # the file system's time as it made the file, minus this cache's clock then

    def close(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            if fcntl is None:
                msvcrt.locking(self.fd, msvcrt.LK_UNLCK, 1)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.fd = -1
        with contextlib.suppress(OSError):
            os.remove(self.path)   # after the close: Windows removes no file open here (left: a later start does)


def clock_of(name: str) -> str | None:
    """The clock id a presence file's name carries, or None for any other name."""
    m = _NAME.match(name)
    return m.group("clock") if m else None


def _try_lock(fd: int) -> bool:
    """Locked without waiting: True when had, False while another process holds it. Raises OSError where the file
    system cannot lock (a network share without locks): nothing can be told there."""
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True
    try:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError as exc:
        if exc.errno in LOCK_HELD_ERRNOS:   # another process holds it
            return False
        raise
    return True


@dataclass(eq=False)
class FolderClock:
    """What a start learnt of one folder: `fs_offset_s` (None: no file could be made there: read-only, the commit
    lock held) and this cache's presence there (None: none kept)."""

    folder: str
    fs_offset_s: float | None
    presence: Presence | None = None

    def close(self) -> None:
        if self.presence is not None:
            self.presence.close()


def announce(io: FileIO, folder: str, clock: str, wall: Callable[[], float],
             slack_s: float = FS_CLOCK_SLACK_S) -> FolderClock:
    """Read the file system's clock in `folder` against `wall` and keep this cache's presence there when `wall` is
    ahead of it by more than `slack_s` (under the commit lock). Where no file can be made or locked, the offset is
    not known: no other clock's far-ahead file there is taken over by this cache (and, its clock ahead, other
    servers could not see it: warned)."""
    path = os.path.join(folder, f"{PREFIX}{clock}.{HOST}-{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}")
    try:
        with io.commit_lock(folder):
            before = wall()
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            presence = Presence(folder, clock, path, fd, 0.0)
            try:
                if not _try_lock(fd):
                    raise OSError(f"{path} is locked by another process")
                presence.fs_offset_s = os.fstat(fd).st_mtime - before
            except BaseException:
                presence.close()
                raise
    except OSError as exc:
        log.debug("conversation cache: no clock file in %s (%s)", folder, exc.strerror or exc)
        return FolderClock(folder, None)
    offset = presence.fs_offset_s
    if offset >= -slack_s:
        presence.close()    # nothing this clock seals looks far ahead to one that agrees with the file system
        return FolderClock(folder, offset)
    log.warning("conversation cache: this clock is %.0f s ahead of the file system's in %s (the time it stamps on a "
                "new file): the files this server seals there look far ahead to a server whose clock agrees with "
                "it (check this machine's date); it marks its use of the folder while it runs, so that such a "
                "server leaves them as they are", -offset, folder)
    return FolderClock(folder, offset, presence)


def live_clocks(folder: str, own: Presence | None = None) -> set[str] | None:
    """The clocks with a live server on `folder` (the caller holds its commit lock), `own`'s not counted; None when
    that cannot be told (a presence file that cannot be opened or locked). A presence file that is not locked was
    left by a server that did not close (killed, a crash, a machine off): removed."""
    live: set[str] = set()
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    for name in names:
        clock = clock_of(name)
        path = os.path.join(folder, name)
        if clock is None or (own is not None and path == own.path):
            continue
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:   # its server closed meanwhile
            continue
        except OSError:
            return None
        try:
            locked = _try_lock(fd)
            if locked and fcntl is None:
                msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        if not locked:
            live.add(clock)
            continue
        with contextlib.suppress(OSError):
            os.remove(path)     # closed first: Windows removes no open file
    return live


def announce_once(known: dict[str, FolderClock], lvl, clock: str, wall: Callable[[], float]) -> None:
    """announce() in disk level `lvl`'s folder (once a folder: `known`, folder -> FolderClock) before the level
    indexes it: a start that would take far-ahead files over sees this server before it has read their seals, not
    after (7a2f5a6 announced once every folder was indexed; a start in between took over files it had read as
    current). The folder is made first, as DiskLevel.open would (which says why one cannot be)."""
    if lvl.folder in known:
        return
    with contextlib.suppress(OSError):
        os.makedirs(lvl.folder, folders.PRIVATE_FOLDER_MODE, exist_ok=True)
    known[lvl.folder] = announce(lvl.io, lvl.folder, clock, wall)


def release_all(folders: dict[str, FolderClock]) -> None:
    for f in folders.values():
        f.close()
