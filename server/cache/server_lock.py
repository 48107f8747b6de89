"""The lock a `strata serve` holds, for its whole life, on each disk level's folder for its model, and on its segment
tier's and system-prompt cache's folders.

Why: each server indexes a level's folder once, at its start, and keeps that index; two servers of one model on one
folder each move down, evict and supersede entries the other still counts (session 39's trial: "missed moved
entries", a miss where the other server had moved the history to cold, budgets kept over files no longer there).
A second server of the same model on a folder that one holds is refused before it loads (exit status 2, naming
the folder and the holder's pid): nothing of either is lost, and the user picks another folder or stops the other.
The segment and system-prompt folders alike: each server indexes them once and evicts only what it indexed, so two
of one model on one such folder could keep it past its budget (each counting its own files only, up to both budgets) and
each evicted files the other still counted (its lookups of them misses, its budget kept over files no longer there).
A file the other replaces is never read torn (a new image's name, its sidecar renamed last; one removed since the
index is a plain miss, restoring.py), but the budgets were not kept. So they are held the same way.
Servers of different models share a folder as before: each reads only its own model's files (the lock's name
carries the model's identity, its GGUF header's hash, as the sidecars do).

What this is: an OS file lock on `.strata-serve-<model>.lock` in the folder (POSIX flock; Windows msvcrt.locking
on one byte past the text, which stays readable), with the holder's pid, host and start written in it for the
other's message, and, once its stop begins (`say_stopping`), when that was: the app waits for a stopping holder to
end (its stop writes the conversations it keeps, minutes for a big model) but not for a live one, and the holder's
own word is the one sure sign of which it is (a closed port is also a server not yet listening). The OS lets it go when the process ends however it ends (a kill, a crash, a power cut), so a file
left behind holds nothing and is taken over: no stale-pid guess (a pid is reused; another host's cannot be
asked). Windows lets a dead process's lock go only eventually: a claim waits up to SERVER_LOCK_WAIT_S for a
holder to let go before it refuses. The file is never removed (a removal races a process that has just opened it).
A folder where no lock can be had (cannot be made or opened, a file system without locks) is used unlocked, as
before, said at INFO.
What this is not: the commit lock (fileio.commit_lock), held for milliseconds around one entry's renames.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass

from strata import folders
from strata.exit_status import FOLDER_IN_USE, STOPPING_SINCE

from .fileio import CommitLockHeld, try_lock, wait_for_lock
from .options import _FOLDER_AND_BUDGET

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

log = logging.getLogger("strata.cache")

LOCK_PREFIX = ".strata-serve-"   # never indexed: a level's entries begin with strata-conv-
TEXT_BYTES = 4096                # the holder's text lies before this offset; Windows locks the byte at it
# how long a claim waits for a holder to let go before it refuses: Windows frees a dead process's lock only
# eventually (fileio.commit_lock unlocks before its close for that), and the app starts its server again 0.5 s after
# a crash; refused, that start ends with exit status 2, which the app does not retry. A live holder waits it out.
SERVER_LOCK_WAIT_S = 5.0


class FolderInUse(Exception):
    """Another live process holds the folder's lock for this model: `holder` says who, as its lock file does."""

    def __init__(self, flag: str, folder: str, holder: str) -> None:
        self.flag, self.folder, self.holder = flag, folder, holder
        store = next((what for what, field, _ in _FOLDER_AND_BUDGET if f"--{field.replace('_', '-')}" == flag), "")
        level = store.endswith(" level")
        # a level's entries move down and are superseded; the segment tier's and system-prompt cache's are evicted
        why = ("each miss the conversations the other moves down or removes" if level or not store else
               "each evicts files the other still counts, past the folder's budget")
        super().__init__(f"{flag} {folder}: {FOLDER_IN_USE} ({holder}); two servers on one folder {why}. Stop that "
                         f"server, or give this one a folder of its own ({flag} DIR), or run it without "
                         f"{'that level' if level or not store else 'the ' + store} "
                         f"({flag.removesuffix('-dir')}-mib 0)")


class SameFolder(FolderInUse):
    """Two of this server's stores name one folder by names its path does not unify (a case-insensitive volume, a
    bind mount): one lock file claimed for both flags. Refused as CacheConfig.check_folders refuses one path."""

    def __init__(self, first: str, flag: str, folder: str) -> None:
        Exception.__init__(self, f"{first} and {flag} name the same folder {folder!r}; give each its own")
        self.flag, self.folder, self.holder = flag, folder, "this server"


def lock_name(model_id: str) -> str:
    return f"{LOCK_PREFIX}{model_id[:16]}.lock"


def held_folders(cache_config) -> list[tuple[str, str]]:
    """(flag, folder) of each disk level that is on, then the segment tier's and the system-prompt cache's where on:
    the folders a server of this configuration indexes once and evicts in (the sessions folder is shared by design:
    its budget is weighed as the folder holds it, session_budget.py)."""
    return [(flag, os.path.abspath(os.path.expanduser(folder))) for flag, folder, mib in cache_config.store_folders()
            if folder and mib > 0]   # as LevelConfig.on: a level is on with a folder and a budget


@dataclass(eq=False)
class _Held:
    fd: int
    text: dict          # what its lock file says of this holder (pid, host, since; stopping once say_stopping)
    count: int = 1


_held: dict[str, _Held] = {}   # the lock file's identity (_identity) -> this process's hold of it
_held_lock = threading.Lock()


def _identity(fd: int, path: str) -> str:
    """The open lock file as one file, however its folder was named: its device and inode (Windows: volume and file
    index). Told apart by path, a folder this process reaches by two names the path does not unify (a
    case-insensitive volume, a bind mount, a link) was locked twice, and the second lock (each open's own, flock
    and msvcrt.locking alike) was refused by the first: the server refused itself. Its path where there is none."""
    st = os.fstat(fd)
    return f"{st.st_dev}:{st.st_ino}" if st.st_ino else os.path.normcase(os.path.realpath(path))


def _try_lock(fd: int) -> bool | None:
    """fileio.try_lock on the byte past the text (Windows locks from the file's position; flock the whole file)."""
    if fcntl is None:
        os.lseek(fd, TEXT_BYTES, os.SEEK_SET)
    return try_lock(fd)


def _unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return
    os.lseek(fd, TEXT_BYTES, os.SEEK_SET)
    msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def _holder_text(path: str) -> str:
    """Who holds `path`'s lock, as its text says: `pid 1234 on host, running since ...[, stopping since ...]`."""
    try:
        with open(path, "rb") as f:
            d = json.loads(f.read(TEXT_BYTES).decode("utf-8"))
        pid, host, since = int(d["pid"]), str(d["host"]), float(d["since"])
        stopping = None if d.get("stopping") is None else float(d["stopping"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):   # not written yet, or something else
        return "a process whose pid its lock file does not say yet"
    where = "" if host == socket.gethostname() else f" on {host}"
    stop = "" if stopping is None else f", {STOPPING_SINCE} {time.strftime('%H:%M:%S', time.localtime(stopping))}"
    return f"pid {pid}{where}, running since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}{stop}"


def _write_text(fd: int, text: dict) -> None:
    """The holder's text at the lock file's start. Best effort: held all the same, the other's message then says
    less (no pid, or not that it is stopping)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(text).encode())
    except OSError:
        pass


def claim(flag: str, folder: str, model_id: str, wait_s: float = SERVER_LOCK_WAIT_S) -> str | None:
    """Hold `folder`'s lock for `model_id` until `release`; FolderInUse when another process still holds it after
    `wait_s`. Returns the lock file's path, or None where no lock can be had (said at INFO; the folder is used
    unlocked)."""
    if not wait_s >= 0:
        raise ValueError(f"wait_s must be >= 0 seconds, got {wait_s!r}")
    path = os.path.join(folder, lock_name(model_id))
    try:
        os.makedirs(folder, folders.PRIVATE_FOLDER_MODE, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), folders.PRIVATE_FILE_MODE)
    except OSError as exc:   # the level says what is wrong with its folder when it opens it
        if os.path.exists(folder) and not os.path.isdir(folder):   # a file there: the level's WARNING says it
            return None
        log.info("conversation cache: %s %s: no lock taken (%s); another server of this model on it would not be "
                 "noticed", flag, folder, exc.strerror or exc)
        return None
    key = _identity(fd, path)
    with _held_lock:
        mine = _held.get(key)
        if mine is not None:   # this process holds it already (a second server in one process: tests)
            os.close(fd)
            mine.count += 1
            return key
        why = ""
        try:
            locked = wait_for_lock(lambda: _try_lock(fd), wait_s)
        except CommitLockHeld:
            os.close(fd)
            raise FolderInUse(flag, folder, _holder_text(path)) from None
        except OSError as exc:   # POSIX: a file system without flock
            locked, why = False, f": {exc.strerror or exc}"
        if not locked:
            os.close(fd)
            log.info("conversation cache: %s %s: no lock taken (its file system cannot lock%s); another server of "
                     "this model on it would not be noticed", flag, folder, why)
            return None
        _held[key] = _Held(fd, {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
        _write_text(fd, _held[key].text)
    return key


def say_stopping(keys: list[str | None]) -> None:
    """Write in each of `keys`' lock files (`claim`'s) that its holder's stop has begun: a start refused for the
    folder meanwhile says so, and the app waits for it to end (app/left_behind.py). A lock another server of this
    process still holds (tests) is left as it is: that one is not stopping."""
    now = time.time()
    with _held_lock:
        for key in keys:
            mine = _held.get(key) if key is not None else None
            if mine is not None and mine.count == 1 and "stopping" not in mine.text:
                mine.text = {**mine.text, "stopping": now}
                _write_text(mine.fd, mine.text)


def release(key: str | None) -> None:
    """End this process's hold taken by `claim` (the last of its claims in this process)."""
    if key is None:
        return
    with _held_lock:
        mine = _held.get(key)
        if mine is None:
            return
        mine.count -= 1
        if mine.count:
            return
        del _held[key]
    try:
        _unlock(mine.fd)
    except OSError:
        pass
    finally:
        os.close(mine.fd)


def claim_folders(cache_config, model_id: str) -> list[str | None]:
    """`claim` every folder of `held_folders`; FolderInUse (holding none of them) when one is held, SameFolder when
    two of them are one folder."""
    keys: list[str | None] = []
    flags: dict[str, str] = {}   # each lock file's first flag: a second is the same folder under another name
    try:
        for flag, folder in held_folders(cache_config):
            keys.append(claim(flag, folder, model_id))
            if keys[-1] in flags:
                raise SameFolder(flags[keys[-1]], flag, folder)
            if keys[-1] is not None:
                flags[keys[-1]] = flag
    except FolderInUse:
        for key in keys:
            release(key)
        raise
    return keys
