"""The one seam through which the cache writes, renames, copies and removes files.

What this is: thin wrappers over os calls with fsync, so a test can inject a full disk (ENOSPC)
or an I/O error in exactly one place by subclassing `FileIO`. What this is not: a cache level; it
knows nothing about entries, budgets or file names.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import BinaryIO

from strata import folders

from .folder_holds import CommitLockHeld, held
from .temp_files import temp_name

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

WINDOWS_COMMIT_LOCK = ".strata-commit.lock"  # one per folder; never indexed (no entry prefix)

# Windows refuses a rename onto, or a removal of, a file another handle holds without FILE_SHARE_DELETE (or maps),
# and a rename of a file just written while such a handle has it: an antivirus or an indexer scanning a new file, a
# backup or sync tool, another server on the folder restoring (mapping) an image. Most such holds last milliseconds;
# robust Windows programs retry (git for Windows: 0, 1, 10, 20, 40 ms; pip: 1 s in 0.25 s steps). The waits here sum
# to 0.31 s, then the refusal is raised as before (counted, warned once). POSIX never says these codes: no retry there.
HOLDER_RETRY_DELAYS_S = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16)
# ERROR_ACCESS_DENIED (a target held open, a file pending deletion, a mapped file), ERROR_SHARING_VIOLATION,
# ERROR_LOCK_VIOLATION. A folder truly read-only for this user also says 5: it is retried for 0.31 s, then raised.
WINDOWS_HELD_ERRORS = frozenset({5, 32, 33})
# A removal's refusal that outlasted every wait is likely to last (a folder this user may not change, which also
# says 5; an image another server maps for the whole of its restore): the same folder's refused removals within this
# long after it are raised at once (each is left for the next start), so a pass over many of its files waits 0.31 s
# once, not 0.31 s a file (the start's removal of skipped files, an eviction plan under the cache's lock and the
# folder's commit lock, which the engine's thread and other servers wait on). A removal done there ends it. A rename
# is always waited for: it carries a write (a park, a session's save) that an antivirus's moment would lose.
HOLDER_STILL_HELD_S = 5.0

# How long commit_lock waits while another process holds a folder's commit lock. A hold lasts milliseconds (two
# renames, an eviction plan's removals; 0.31 s a file a holder refuses, a folder fsync); one past this is a hung
# server on the folder (a dying disk, a network folder gone), which held this one's spill writer, and its stop,
# for good. Under the app's 15 s limit for a silent stop, and msvcrt's own LK_LOCK gives up at 10 s too.
COMMIT_LOCK_WAIT_S = 10.0
# after a wait that ended so, the folder's lock is tried once, without waiting, for this long (an index's pass
# over many files, the spill writer's queue: one wait, not one each); a lock had there ends it
COMMIT_LOCK_STILL_HELD_S = 60.0
LOCK_POLL_FIRST_S, LOCK_POLL_MAX_S = 0.001, 0.05   # the waits between tries double from the first to the most


def held_by_another(exc: OSError) -> bool:
    """Whether Windows refused a file operation because another handle holds the file (a hold that may end)."""
    return getattr(exc, "winerror", None) in WINDOWS_HELD_ERRORS


class FileIO:
    """Real file operations. Subclass and override `write` to inject faults."""

    # told the size of each write once it is made (a stop's sign of life while one big history is written)
    on_write: Callable[[int], None] | None = None
    holder_retry_delays_s: tuple[float, ...] = HOLDER_RETRY_DELAYS_S
    commit_lock_wait_s: float = COMMIT_LOCK_WAIT_S

    def refused_for_now(self, exc: OSError) -> bool:
        """Whether a refused rename or removal is worth trying again shortly (Windows: another handle holds it)."""
        return held_by_another(exc)

    def _retrying(self, op: Callable[..., None], *paths: str, quiet: bool = True) -> None:
        """`op(*paths)`, tried again after each of `holder_retry_delays_s` while it is refused for now; at once
        only while a refusal in the same folder outlasted them less than HOLDER_STILL_HELD_S ago. Not `quiet` (a
        rename: it carries a write, a park's or a session save's, which a refusal loses) it is always waited for, and
        neither begins nor ends a folder's quiet (its source may be in another folder, held by another)."""
        folder = os.path.dirname(os.path.abspath(paths[-1]))
        # folder -> time.monotonic() when a removal's refusal there outlasted the waits (a dict: set and pop are
        # atomic, and the worker thread and the spill writer share this object; made here: test subclasses skip
        # __init__)
        held = self.__dict__.setdefault("_held_at", {}) if quiet else {}
        since = held.get(folder)
        waits = self.holder_retry_delays_s
        if since is not None and time.monotonic() - since < HOLDER_STILL_HELD_S:
            waits = ()
        for delay in (*waits, None):
            try:
                op(*paths)
            except OSError as exc:
                if delay is None or not self.refused_for_now(exc):
                    if delay is None and waits:   # refused after every wait: the folder's next refusals at once
                        held[folder] = time.monotonic()
                    raise
            else:
                held.pop(folder, None)
                return
            time.sleep(delay)

    def open_new(self, path: str) -> BinaryIO:
        # a temporary name is this writer's alone ("x": never write into another's); readable by its user only
        return open(path, "xb", opener=lambda p, flags: os.open(p, flags, folders.PRIVATE_FILE_MODE))

    @contextlib.contextmanager
    def commit_lock(self, folder: str, wait_s: float | None = None) -> Iterator[None]:
        """Hold the folder's commit lock (across processes) while an entry's files are renamed into
        place or removed, so two writers of one key cannot leave one's image under the other's sidecar.
        This process's threads take turns first (folder_holds.held: one in-process lock per folder), so the
        file lock only arbitrates between processes and one thread's close never lets another's go.
        POSIX locks the folder itself (flock on its descriptor: no file is made); Windows a lock file
        in it. Released by the OS if the process dies. A folder that cannot be opened is not locked:
        the rename that follows fails with its own error; nor is one whose file system cannot lock (Windows).
        Waits at most `wait_s` (default `commit_lock_wait_s`) in all while another thread or process holds it, then
        raises CommitLockHeld (the caller says so, as of any refusal); after a wait for another process that ended
        so, the folder's next tries, for COMMIT_LOCK_STILL_HELD_S, do not wait for it."""
        wait_s = self.commit_lock_wait_s if wait_s is None else wait_s
        began = time.monotonic()
        with held(folder, wait_s) as hold:
            try:
                if fcntl is not None:
                    fd = os.open(folder, os.O_RDONLY)
                else:
                    fd = os.open(os.path.join(folder, WINDOWS_COMMIT_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                yield
                return
            try:
                held_at = self.__dict__.setdefault("_lock_held_at", {})   # folder -> when a wait there ended unlocked
                since = held_at.get(folder)
                quiet = since is not None and time.monotonic() - since < COMMIT_LOCK_STILL_HELD_S
                left = max(0.0, wait_s - (time.monotonic() - began))   # what the wait for this process's threads left
                hold.waiting = True   # until had: a thread of this process waiting behind blames the other process
                try:
                    locked = wait_for_lock(lambda: try_lock(fd), 0.0 if quiet else left)
                except CommitLockHeld:
                    if not quiet:
                        held_at[folder] = time.monotonic()
                        raise
                    raise CommitLockHeld(errno.EAGAIN, f"its commit lock is still held by another process (a wait "
                                                       f"for it gave up {time.monotonic() - since:.0f} s ago; a "
                                                       "Strata server on this folder that has hung?)") from None
                hold.waiting = False
                held_at.pop(folder, None)
                try:
                    yield
                finally:
                    if fcntl is None and locked:
                        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)  # Windows frees a closed file's lock only eventually
            finally:
                os.close(fd)  # closing releases the flock; then the next thread of this process may take it

    def write(self, f: BinaryIO, data: bytes | memoryview) -> None:
        f.write(data)
        if self.on_write is not None:
            self.on_write(len(data))

    def sync_close(self, f: BinaryIO) -> None:
        try:
            f.flush()
            os.fsync(f.fileno())
        finally:
            f.close()

    def rename(self, src: str, dst: str) -> None:
        """os.replace (os.rename fails on Windows where `dst` exists), tried again while another handle holds
        `src` or `dst` (Windows)."""
        self._retrying(os.replace, src, dst, quiet=False)

    def same_volume(self, src: str, dst_folder: str) -> bool:
        try:
            return os.stat(src).st_dev == os.stat(dst_folder).st_dev
        except OSError:
            return False

    def copy(self, src: str, dst: str, piece_bytes: int = 16 << 20) -> None:
        """Copy through `write` (so faults apply), fsync, no rename (the caller renames)."""
        with open(src, "rb") as fin:
            f = self.open_new(dst)
            try:
                while True:
                    piece = fin.read(piece_bytes)
                    if not piece:
                        break
                    self.write(f, piece)
            finally:
                self.sync_close(f)

    def free_bytes(self, folder: str) -> int | None:
        """The free space of `folder`'s volume for this user; None when it cannot be told."""
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            return None

    def remove(self, path: str) -> None:
        """Remove a file; nothing when there is none, nor when a folder stands in its place (the cache
        deletes only what it wrote; the next index skips the folder as an orphan and says so). Tried again while
        another handle holds the file (Windows)."""
        self._retrying(_remove_file, path)

    def sync_folder(self, folder: str) -> None:
        if not hasattr(os, "O_DIRECTORY"):
            return  # Windows: no directory fsync
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# what msvcrt.locking says when another process holds the lock: try again
LOCK_HELD_ERRNOS = frozenset({errno.EACCES, getattr(errno, "EDEADLOCK", errno.EDEADLK)})


def wait_for_lock(try_once: Callable[[], bool], wait_s: float, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> bool:
    """`try_once()` until it answers True (locked) or False (this file system cannot lock: go on unlocked), while it
    answers None (another process holds the lock), for at most `wait_s` of `clock` (once when 0); then CommitLockHeld.
    Before, the wait had no end: a hung server on the folder held this one's spill writer and its stop for good."""
    began, delay = clock(), LOCK_POLL_FIRST_S
    while True:
        got = try_once()
        if got is not None:
            return got
        waited = clock() - began
        if waited >= wait_s:
            raise CommitLockHeld(errno.EAGAIN, f"its commit lock has been held by another process for {waited:.1f} s "
                                               f"(a Strata server on this folder that has hung?)")
        sleep(min(delay, wait_s - waited))
        delay = min(2 * delay, LOCK_POLL_MAX_S)


def try_lock(fd: int) -> bool | None:
    """`fd`'s lock without waiting (POSIX flock; Windows msvcrt.locking of the byte at its position): True when had,
    None while another process holds it, False where the file system cannot lock (Windows); POSIX raises the rest."""
    return _posix_try_lock(fd) if fcntl is not None else _windows_try_lock(fd)


def _posix_try_lock(fd: int) -> bool | None:
    """flock without waiting: True when had, None while another holds it (another error is raised, as before)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return None
    return True


def _windows_try_lock(fd: int) -> bool | None:
    """The commit lock file's first byte locked without waiting: True when had, None while another process holds
    it, False where the file system cannot lock (EINVAL, EBADF: a network share without locks), which goes on
    unlocked as a folder that cannot be opened does (such a refusal was retried for ever once)."""
    try:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError as exc:
        return None if exc.errno in LOCK_HELD_ERRNOS else False
    return True


def _remove_file(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError:   # IsADirectoryError; PermissionError on Windows
        if not os.path.isdir(path):
            raise


class SlowDiskIO(FileIO):
    """Every write waits `delay_s` first: a disk slow for real, for the tests of a long stop (what the app waits
    for while a big model's histories are written at its stop). Chosen by `STRATA_TEST_DISK_WRITE_DELAY_S`."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def write(self, f: BinaryIO, data: bytes | memoryview) -> None:
        time.sleep(self.delay_s)
        super().write(f, data)


class HangingDiskIO(SlowDiskIO):
    """A disk whose write of a session image hangs once `hang_after` such writes were made: the write blocks until
    `release()` (a network folder gone, a dying disk; the process may end first), later writes go on. Chosen by
    `STRATA_TEST_SESSION_WRITE_HANG_AFTER`, for the tests of a stop that gives such a save up."""

    SESSION_IMAGE = "strata-session-"   # a session image's temporary file name begins so (sessions.SESSION_PREFIX)

    def __init__(self, hang_after: int, delay_s: float = 0.0) -> None:
        super().__init__(delay_s)
        self.hang_after = hang_after
        self.made = 0
        self.hung = threading.Event()       # set once the hanging write has begun
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def write(self, f: BinaryIO, data: bytes | memoryview) -> None:
        name = os.path.basename(getattr(f, "name", "") or "")
        if name.startswith(self.SESSION_IMAGE) and ".img" in name:
            self.made += 1
            if self.made == self.hang_after + 1:
                self.hung.set()
                self._released.wait()
        super().write(f, data)


class HangingRemoveIO(SlowDiskIO):
    """A disk whose removal of a session's sidecar hangs until `release()` (a network folder gone, a dying disk, a big
    file an antivirus scans; the process may end first): a DELETE's, which removes it once it has moved it out of the
    way (`strata-session-<name>.json.<host>-<pid>-<random>.tmp`). Chosen by `STRATA_TEST_SESSION_REMOVE_HANG=1`, for
    the tests of a DELETE that must hold neither the other requests, the other saves in its folder, nor the stop."""

    SIDECAR = ("strata-session-", ".json")   # a session's sidecar (sessions.SESSION_PREFIX), under a name of its own

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__(delay_s)
        self.hung = threading.Event()       # set once a hanging removal has begun
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def remove(self, path: str) -> None:
        name = os.path.basename(path)
        if name.startswith(self.SIDECAR[0]) and (name.endswith(self.SIDECAR[1]) or f"{self.SIDECAR[1]}." in name):
            self.hung.set()
            self._released.wait()
        super().remove(path)


def file_io_from_env(environ: Mapping[str, str] | None = None) -> FileIO:
    """The real FileIO, or a SlowDiskIO when `STRATA_TEST_DISK_WRITE_DELAY_S` (seconds per write) is set, a
    HangingDiskIO when `STRATA_TEST_SESSION_WRITE_HANG_AFTER` (session image writes made before one hangs) is, a
    HangingRemoveIO when `STRATA_TEST_SESSION_REMOVE_HANG` is 1: tests only. A malformed value is a ValueError naming
    the variable."""
    env = os.environ if environ is None else environ
    raw = env.get("STRATA_TEST_DISK_WRITE_DELAY_S", "").strip()
    hang = env.get("STRATA_TEST_SESSION_WRITE_HANG_AFTER", "").strip()
    hang_remove = env.get("STRATA_TEST_SESSION_REMOVE_HANG", "").strip()
    if hang_remove not in ("", "0", "1"):
        raise ValueError(f"STRATA_TEST_SESSION_REMOVE_HANG must be 0 or 1, got {hang_remove!r}")
    if hang_remove == "1" and hang:
        raise ValueError("STRATA_TEST_SESSION_REMOVE_HANG and STRATA_TEST_SESSION_WRITE_HANG_AFTER: set one of them")
    delay = 0.0
    if raw:
        try:
            delay = float(raw)
        except ValueError:
            raise ValueError(f"STRATA_TEST_DISK_WRITE_DELAY_S must be a number of seconds, got {raw!r}") from None
        if not 0 <= delay <= 3600:
            raise ValueError(f"STRATA_TEST_DISK_WRITE_DELAY_S must be 0..3600 seconds, got {raw!r}")
    if hang:
        if not (hang.isascii() and hang.isdigit()) or int(hang) > 1_000_000:
            raise ValueError(f"STRATA_TEST_SESSION_WRITE_HANG_AFTER must be a count of writes 0..1000000, got {hang!r}")
        return HangingDiskIO(int(hang), delay)
    if hang_remove == "1":
        return HangingRemoveIO(delay)
    return SlowDiskIO(delay) if raw else FileIO()


class FullDiskIO(FileIO):
    """A FileIO whose disk holds `capacity` more bytes, then every write fails with ENOSPC."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.written = 0

    def write(self, f: BinaryIO, data: bytes | memoryview) -> None:
        if self.written + len(data) > self.capacity:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written += len(data)
        super().write(f, data)


def stage_move(io: FileIO, src: str, dst: str) -> tuple[str, str]:
    """Make `src` ready to be renamed to `dst`: on one volume it already is; across volumes it is copied
    to a temporary name beside `dst` first (the slow part, done before the caller takes the commit
    lock). Returns (the path to rename to `dst`, "rename" or "copy"). On failure nothing is left
    beside `dst` and `src` is untouched; the caller deletes the source once the move is committed."""
    folder = os.path.dirname(dst) or "."
    if io.same_volume(src, folder):
        return src, "rename"
    tmp = temp_name(dst)
    try:
        io.copy(src, tmp)
    except BaseException:
        io.remove(tmp)
        raise
    return tmp, "copy"
