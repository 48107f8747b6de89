"""Named sessions: a context's state saved to / restored from a file by a name the client picks.

What this is: name validation (no path tricks: letters, digits, `.`, `_`, `-`, not starting with
a dot, at most 100 characters), the sessions folder as a DiskLevel of files
`strata-session-<name>.img` + `.json`, opened on first use, and `ConversationCache`'s session
methods (a mixin: save, restore, delete, list), which run through the same placement function and
streamed restore as every disk read. A session an older Strata saved (its sidecar's KV revision below
this engine's) is kept and listed as needing a rebuild: its image is of no use, its checked token ids
are what the server reads again (server/session_rebuild.py) before saving it anew. What this is not:
the placement rule (policy.py), the restore passes (restoring.py, pipeline.py) or the rebuild's reading.

Names differ in more than case: a save under a name that differs only in case from a saved session's is
refused (SessionConflictError, a 409) on every OS, because on Windows and macOS the two names are one file
(two agents saving `Work` and `work` overwrote each other's session there, and a DELETE of one removed the
other's files). A restore or DELETE names a session exactly; another case is a 404.
Each save's image has a name of its own that its sidecar records (disk.py, `versioned_images`): a save that
fails at any step leaves the session saved before whole.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from . import policy
from .disk import DiskEntry, DiskLevel, Identity, tokens_array
from .fileio import FileIO
from .memory import MIB
from .restoring import RestoreResult
from .temp_files import temp_name

log = logging.getLogger("strata.cache")

SESSION_PREFIX = "strata-session-"
GIVEN_UP_POLL_S = 0.1   # how often a DELETE waiting for a save's lock looks whether the stop gave that save up
# How long a DELETE waits for the removal of its session's files once they are moved out of the way (the session is
# deleted then): an unlink of a multi-GiB image takes well under this on a local disk, so the files are gone when it
# answers; one past it (a network folder, a scanner holding the file) goes on on its thread, and the DELETE answers.
REMOVAL_WAIT_S = 2.0
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


@dataclass
class SaveUnderWay:
    """A session save being written (`ConversationCache.saving`): what a stop waiting for it says, how far it is.
    `written` counts the image's bytes written so far (its pieces, as each is written), `n_bytes` the context's KV,
    `moved_at` is when a piece was last written (time.monotonic); `abandoned` is set by a stop that gave the save
    up (no piece written for its stall limit: cache.close): the save then writes nothing more."""

    name: str
    n_bytes: int
    written: int = 0
    moved_at: float = field(default_factory=time.monotonic)
    abandoned: bool = False


def _counted(pieces: Iterable[bytes], save: SaveUnderWay) -> Iterator[bytes]:
    """`pieces`, each counted in `save.written` once the writer asks for the next (it has been written then). A save
    the stop abandoned fails at its next piece, or after its last (its temporary file is then removed)."""
    for piece in pieces:
        if save.abandoned:
            break
        yield piece
        save.written += len(piece)
        save.moved_at = time.monotonic()
    _still_wanted(save)


def _still_wanted(save: SaveUnderWay) -> None:
    """An OSError once the stop gave `save` up: it then writes nothing more (the pieces' end, before the renames)."""
    if save.abandoned:
        raise OSError(errno.ECANCELED, f"the save of session {save.name!r} was abandoned at the server's stop "
                                       "(its write made no progress)")


def hold_unless_given_up(lock: threading.Lock, saving: Callable[[], SaveUnderWay | None]) -> None:
    """Acquire `lock`, which a session save holds while it writes (the cache's `session_writes`, the session
    backend's lock around a rebuild's save). An OSError (ECANCELED), `lock` not held, once the save `saving()`
    names was given up by the stop: its write hangs and never frees the lock, and a DELETE waiting for it on the
    event loop's executor held the process's end for ever (the interpreter joins those threads at its exit)."""
    while not lock.acquire(timeout=GIVEN_UP_POLL_S):
        save = saving()
        if save is not None and save.abandoned:
            raise OSError(errno.ECANCELED, f"a save of session {save.name!r} hung and the server's stop gave it up: "
                                           "nothing was done (retry once the server runs again)")


@dataclass(eq=False)
class SessionRemoval:
    """A DELETE's removal of a session's files, on a daemon thread of its own, outside the cache's lock and the save
    lock: one that hangs (a network folder gone, a dying disk) held the cache's lock, and with it every park, every
    session call and the stop, for ever. `entry` is what the index held (put back when the sidecar cannot be
    moved); `done` is set once its files are moved out of the way (the session is deleted then) or the move failed,
    `error` is the OSError the move raised; `removed` once the moved files' removal, after that, has ended."""

    name: str
    entry: DiskEntry | None
    done: threading.Event = field(default_factory=threading.Event)
    error: OSError | None = None
    removed: threading.Event = field(default_factory=threading.Event)


class SessionNameError(ValueError):
    pass


class SessionConflictError(Exception):
    """A save under a name that differs only in case from a saved session's (a 409): one file on Windows and macOS."""

    def __init__(self, name: str, saved: str) -> None:
        super().__init__(f"session name {name!r} differs only in case from the saved session {saved!r}: names must "
                         "differ in more than case (on Windows and macOS they name the same file); save or restore "
                         f"{saved!r}, DELETE it first, or pick another name")
        self.saved = saved


class SessionBeingDeletedError(SessionConflictError):
    """A save under a name whose DELETE is still removing its files (a 409): it would land among them."""

    def __init__(self, name: str) -> None:
        Exception.__init__(self, f"session {name!r} is being deleted (the removal of its files has not ended): save "
                                 "it again once the DELETE has answered")
        self.saved = name


class StaleSessionError(Exception):
    """A session an older Strata saved whose sidecar does not check (its tokens' hash, a field): never
    trusted, so not rebuilt either; kept on disk (the user saved it). The message says why and what to do."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"session {name!r} was saved by an older Strata and its sidecar is damaged ({why}): its "
                         "tokens cannot be trusted to rebuild it; save it again (DELETE removes the old one)")


def validate_session_name(name: object) -> str:
    """Return the name if it is safe as part of a file name; raise SessionNameError naming it."""
    # fullmatch: `$` also matches before a last newline, so 'work\n' (a URL's 'work%0A') was a valid name, its files
    # named with a newline: refused by Windows (507, not 400), and a folder saved on Linux Windows cannot hold
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name or name.endswith((".tmp", ".")):
        raise SessionNameError(
            f"invalid session name {name!r}: use 1-100 letters, digits, '.', '_' or '-', "
            "not starting with '.', no '..'")
    return name


class SessionStore:
    def __init__(self, folder: str, identity: Identity, *, io: FileIO | None = None,
                 piece_bytes: int | None = None) -> None:
        kwargs = {"piece_bytes": piece_bytes} if piece_bytes else {}
        self.level = DiskLevel("sessions", folder, 0, 0.0, identity, io=io, prefix=SESSION_PREFIX,
                               versioned_images=True, **kwargs)
        self._opened = False
        # the first save (the worker thread) and a first list or DELETE (the event loop's executor) both indexed
        # the folder: the one that finished last could drop the other's new entry until a restart
        self._opening = threading.Lock()

    def ensure_open(self) -> DiskLevel:
        if self._opened:
            return self.level
        with self._opening:
            if self._opened:
                return self.level
            self.level.open()
            self._opened = True
            for name, why in self.level.swept:   # a save given up at a stop, or killed: its part, never an entry
                log.info("sessions folder: removed %s, a temporary file left by a save or a DELETE that did not "
                         "finish (%s)",
                         os.path.join(self.level.folder, name), why)
            for name in self.level.removed_files:
                log.info("sessions folder: removed %s, an image no sidecar names (a save that failed or was stopped "
                         "before its sidecar was in place, or an earlier save's image left behind)",
                         os.path.join(self.level.folder, name))
        return self.level

    def move_out(self, key: str) -> list[str]:
        """A DELETE's first step: the files of `key` renamed out of the way, the sidecar first, under the folder's
        commit lock (never between another server's image and its sidecar), to temporary names of this process that
        no reader takes for an entry and a later start removes; returns those names. The index is left alone (the
        caller unindexed it). OSError when the sidecar cannot be moved: the session stands. Their removal
        (remove_moved) comes after the lock: one that hangs (a network folder, a multi-GiB image an antivirus scans)
        held the lock, and every other save in the folder, this server's and another's, waited COMMIT_LOCK_WAIT_S
        for it and failed (507)."""
        lvl = self.level
        with lvl.io.commit_lock(lvl.folder):
            return self._move_out(key)

    def remove_moved(self, key: str, moved: list[str]) -> None:
        """Remove the files move_out moved, outside every lock; one that cannot be removed is warned of (the session
        is gone: the next start removes what is left)."""
        lvl = self.level
        for path in moved:
            try:
                lvl.io.remove(path)
            except OSError as exc:
                lvl.remove_failures += 1
                log.warning("sessions folder: %s deleted, but %s, its file moved out of the way, cannot be removed "
                            "(%s); the next start removes it", key, path, exc.strerror or exc)

    def _move_out(self, key: str) -> list[str]:
        """Rename the sidecar, then every image of `key`, to temporary names (the caller holds the commit lock);
        returns those names. A folder standing in a file's place is left alone (the cache moves only what it
        wrote). OSError when the sidecar cannot be moved; an image that cannot be is warned of, never read again."""
        lvl = self.level
        paths = [lvl.sidecar_path(key)]
        try:
            paths += [os.path.join(lvl.folder, n) for n in lvl.images_of(key)]
        except OSError as exc:
            log.warning("sessions folder: %s deleted, but its folder cannot be listed to remove its images (%s); the "
                        "next start removes them", key, exc.strerror or exc)
        moved = []
        for path in paths:
            if os.path.isdir(path):
                continue
            out = temp_name(path)
            try:
                lvl.io.rename(path, out)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if path == paths[0]:
                    raise
                lvl.remove_failures += 1
                log.warning("sessions folder: %s deleted, but an image of it cannot be removed (%s cannot be moved "
                            "out of the way: %s); it is never read (no sidecar names it) and the next start removes "
                            "it", key, os.path.basename(path), exc.strerror or exc)
                continue
            moved.append(out)
        return moved

    def names_on_disk(self) -> set[str]:
        """The session names whose files the folder lists, spelled as listed (sidecars, images, each generation)."""
        lvl = self.ensure_open()
        try:
            names = os.listdir(lvl.folder)
        except OSError:
            return set(lvl.entries)
        return {n[len(lvl.prefix):].rsplit(".", 1)[0].split("@", 1)[0] for n in names
                if n.startswith(lvl.prefix) and n.endswith((".json", ".img"))}

    def case_twin(self, name: str) -> str | None:
        """A saved session whose name differs from `name` only in case (None when `name` itself is there, as two
        sessions an older Strata saved on a file system that tells case apart may be)."""
        on_disk = self.names_on_disk() | set(self.level.entries)
        if name in on_disk:
            return None
        return next((k for k in sorted(on_disk) if k.lower() == name.lower()), None)

    def is_stale(self, name: str) -> bool:
        """Whether `name`'s files are still there and were skipped at open as an older engine's (and this
        version has not saved it again since)."""
        lvl = self.ensure_open()
        sidecar = f"{lvl.prefix}{name}.json"
        return (name not in lvl.entries and any(n == sidecar and reason == "stale" for n, reason, _ in lvl.skipped_files)
                and os.path.exists(lvl.sidecar_path(name)))

    def stale_names(self) -> list[str]:
        lvl = self.ensure_open()
        skipped = sorted(n[len(lvl.prefix):-len(".json")] for n, reason, _ in lvl.skipped_files if reason == "stale")
        return [k for k in skipped if self.is_stale(k)]

    def stale_entry(self, name: str) -> DiskEntry | None:
        """The sidecar of `name` when it is an older Strata's (None when it is not, or gone): its token ids checked
        against their hash; StaleSessionError when they do not check (damaged: never trusted)."""
        if not self.is_stale(name):
            return None
        try:
            return self.level.read_sidecar(name, older=True)
        except FileNotFoundError:    # deleted since the index
            return None
        except (OSError, ValueError, KeyError, TypeError, ArithmeticError, RecursionError) as exc:
            raise StaleSessionError(name, f"{type(exc).__name__}: {exc}") from None

    def list(self) -> list[dict]:
        lvl = self.ensure_open()
        out = [{"name": e.key, "n_tokens": e.n_tokens, "bytes": e.image_bytes, "created_at": e.created_at,
                "needs_rebuild": False} for e in lvl.entries.values()]
        for name in self.stale_names():
            try:
                e = self.stale_entry(name)
            except StaleSessionError:    # damaged: not listed, as a damaged session of today is not
                continue
            if e is not None:
                out.append({"name": e.key, "n_tokens": e.n_tokens, "bytes": e.image_bytes,
                            "created_at": e.created_at, "needs_rebuild": True})
        return sorted(out, key=lambda d: d["name"])


class SessionsMixin:
    def save_session(self, name: str, ctx: int) -> dict:
        name = validate_session_name(name)
        tokens = tokens_array(self.engine.context_tokens(ctx))
        if tokens.shape[0] == 0:
            raise ValueError(f"context {ctx} is empty: nothing to save")
        c = self.config
        adm = policy.place_disk_io(self.memory.available_mib(), self.engine.context_bytes(ctx) / MIB,
                                   c.conversation_cache_min_free_mib, c.conversation_cache_park_min_free_mib,
                                   "session_save")
        self._admit(adm, "session_save", "save")
        if adm.destination != policy.DISK:
            raise MemoryError(adm.reason)
        lvl = self.sessions.ensure_open()
        save = SaveUnderWay(name, int(self.engine.context_bytes(ctx)))
        # held while the files are written: a DELETE waits for it, a stop's close waits for it while it is written
        # and gives it up when it hangs (cache.close); not the cache's lock, which the close then needs
        with self.session_writes:
            with self._lock:
                if name in self.deleting:
                    raise SessionBeingDeletedError(name)
                twin = self.sessions.case_twin(name)
                if twin is not None:
                    raise SessionConflictError(name, twin)
                self.saving = save
            try:
                e = lvl.write(name, "session", tokens, _counted(self.engine.snapshot_chunks(ctx), save), self.clock(),
                              ready=lambda: _still_wanted(save))
            finally:
                self.saving = None
            with self._lock:
                lvl.add(e)
        return {"name": name, "n_tokens": e.n_tokens, "bytes": e.image_bytes, "floor": adm.floor}

    def has_session(self, name: str) -> bool:
        """Whether a session of this name is saved, by this version or an older one (asked before a restore
        touches the context); StaleSessionError for an older one whose sidecar does not check."""
        name = validate_session_name(name)
        lvl = self.sessions.ensure_open()
        with self._lock:
            return name not in self.deleting and (name in lvl.entries or self.sessions.stale_entry(name) is not None)

    def session_to_rebuild(self, name: str) -> np.ndarray | None:
        """The token ids of session `name` when an older Strata saved it (its KV is to be read again from them),
        None when this version saved it or there is none; StaleSessionError when its sidecar does not check."""
        name = validate_session_name(name)
        self.sessions.ensure_open()
        with self._lock:
            entry = self.sessions.stale_entry(name)
        return None if entry is None else entry.tokens

    def restore_session(self, name: str, ctx: int) -> RestoreResult:
        """Restore a session this version saved (an older one's is rebuilt from its tokens by the server:
        session_to_rebuild)."""
        name = validate_session_name(name)
        lvl = self.sessions.ensure_open()
        with self._lock:
            entry = lvl.entries.get(name)
            if entry is None:
                raise KeyError(self.missing_session(name))
            return self._restore_disk(lvl, entry, ctx, entry.n_tokens, "session_restore", time.perf_counter(),
                                      discard_damaged=False)

    def missing_session(self, name: str) -> str:
        """What a 404 for `name` says: that an older Strata saved it, or which session differs from it in case."""
        with self._lock:
            if self.sessions.is_stale(name):
                return f"no session named {name!r} saved by this version (an older Strata saved it: it is rebuilt " \
                       "from its tokens)"
            twin = self.sessions.case_twin(name)
        return f"no session named {name!r}" + (f" (one named {twin!r} is saved: names differ in more than case)"
                                               if twin else "")

    def delete_session(self, name: str) -> bool:
        """Deletes session `name`; False when there is none. OSError (a 507) when its sidecar cannot be removed (it
        stays, listed and restorable), or when the server stopped before the removal ended (wait_for_removal)."""
        removal = self.start_delete(name)
        if removal is None:
            return False
        self.wait_for_removal(removal)
        return True

    def start_delete(self, name: str) -> SessionRemoval | None:
        """Unindexes session `name` (from here on not listed, restored, nor saved over until its files are moved out
        of the way) and starts their move and removal on a thread of its own; None when there is no such session. A
        DELETE of a name being moved gets that removal."""
        name = validate_session_name(name)
        lvl = self.sessions.ensure_open()
        # a save under way ends first (then its files are removed); one the stop gave up never does
        hold_unless_given_up(self.session_writes, lambda: self.saving)
        try:
            with self._lock:
                under_way = self.deleting.get(name)
                if under_way is not None:
                    return under_way
                # its files as listed, exactly: on Windows and macOS another case's name opens the same files
                if not (name in lvl.entries or self.sessions.is_stale(name) or name in self.sessions.names_on_disk()):
                    return None
                removal = self.deleting[name] = SessionRemoval(name, lvl.entries.pop(name, None))
        finally:
            self.session_writes.release()
        threading.Thread(target=self._remove_session, args=(lvl, removal), name="strata-session-delete",
                         daemon=True).start()   # a daemon: one that hangs does not hold the process's end
        return removal

    def _remove_session(self, lvl: DiskLevel, removal: SessionRemoval) -> None:
        moved: list[str] = []
        try:
            moved = self.sessions.move_out(removal.name)
        except OSError as exc:
            removal.error = exc
        finally:
            with self._lock:
                del self.deleting[removal.name]
                if removal.error is not None and removal.entry is not None and removal.name not in lvl.entries:
                    lvl.entries[removal.name] = removal.entry   # its sidecar stands: still an entry
            removal.done.set()
        try:
            self.sessions.remove_moved(removal.name, moved)   # outside every lock: one that hangs holds nothing
        finally:
            removal.removed.set()

    def wait_for_removal(self, removal: SessionRemoval) -> None:
        """Until `removal` has moved the session's files out of the way (its OSError raised), or the cache has closed:
        a move that still hangs is then given up (OSError, ECANCELED), as the close gives up a save that hangs, so
        that this wait on the event loop's executor does not hold the process's end (asyncio.run joins those threads)
        nor is the stop kept waiting. Then until the moved files are removed, for at most REMOVAL_WAIT_S (the session
        is deleted: one whose removal hangs goes on on its thread, and the DELETE answers)."""
        while not removal.done.wait(GIVEN_UP_POLL_S):
            if self.closed:
                log.warning("stopping: the DELETE of session %r has not ended (the removal of its files does not "
                            "return); given up: files of it left are found again at the next start (DELETE it "
                            "again then)", removal.name)
                raise OSError(errno.ECANCELED, f"the removal of session {removal.name!r}'s files had not ended when "
                                               "the server stopped; given up: DELETE it again once the server runs")
        if removal.error is not None:
            raise removal.error
        if not removal.removed.wait(REMOVAL_WAIT_S):
            log.warning("sessions folder: %s deleted, but the removal of its files, moved out of the way, has not ended "
                        "in %.0f s; it goes on (the next start removes what is left)", removal.name, REMOVAL_WAIT_S)

    def list_sessions(self) -> list[dict]:
        with self._lock:
            return [s for s in self.sessions.list() if s["name"] not in self.deleting]
