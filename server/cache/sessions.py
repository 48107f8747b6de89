"""Named sessions: a context's state saved to / restored from a file by a name the client picks.

What this is: name validation (no path tricks: letters, digits, `.`, `_`, `-`, not starting with
a dot, at most 100 characters) and `ConversationCache`'s session methods (a mixin: save, restore, delete, list) over
the sessions folder (session_store.py: each model's sessions its own, `strata-session-<name>~<model tag>.json` +
`.img`; a session of a name only another model saved is a SessionOfAnotherModelError, a 409 naming that model,
to a restore and a DELETE), which run through the same placement function and
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

from strata import model_names

from . import policy
from .disk import DiskEntry, DiskLevel, tokens_array
from .memory import MIB
from .restoring import RestoreResult, common_prefix_len
from .session_budget import SavedSession, plan_session_room
from .session_store import SESSION_PREFIX, OtherModelsSession, SessionStore, StaleSessionError, split_key

__all__ = ["SESSION_PREFIX", "SessionStore", "StaleSessionError"]   # re-exported: their home was this module

log = logging.getLogger("strata.cache")

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
    session call and the stop, for ever. `keys` are this model's files of the name (its own save's, one saved before
    tags); `entries` what the index held of them (put back when a sidecar cannot be moved); `done` is set once its
    files are moved out of the way (the session is deleted then) or the move failed, `error` is the OSError the move
    raised; `removed` once the moved files' removal, after that, has ended."""

    name: str
    keys: list[str]
    entries: dict[str, DiskEntry]
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


class SessionsFolderFullError(OSError):
    """A save that would take the sessions folder past its budget (--conversation-cache-sessions-mib; a 507): the
    message names the folder, its use, the budget and what would free room. Nothing is written or deleted."""


class SessionOfAnotherModelError(SessionConflictError):
    """A restore or DELETE of a name only another model saved a session under (a 409): sessions are per model."""

    def __init__(self, name: str, other: OtherModelsSession, this_model: str) -> None:
        Exception.__init__(self, f"session {name!r} was saved by {other.says()}; this server runs model "
                                 f"{this_model!r}, which has no session of that name: start Strata with that model "
                                 "to restore or delete it (saving this model's under the name leaves it as it is)")
        self.saved = name
        self.other = other


def validate_session_name(name: object) -> str:
    """Return the name if it is safe as part of a file name; raise SessionNameError naming it."""
    # fullmatch: `$` also matches before a last newline, so 'work\n' (a URL's 'work%0A') was a valid name, its files
    # named with a newline: refused by Windows (507, not 400), and a folder saved on Linux Windows cannot hold
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name or name.endswith((".tmp", ".")):
        raise SessionNameError(
            f"invalid session name {name!r}: use 1-100 letters, digits, '.', '_' or '-', "
            "not starting with '.', no '..'")
    return name


class SessionsMixin:
    @property
    def model_name(self) -> str:
        """This server's model as sessions record it: its file name without .gguf (`strata models`' id)."""
        path = getattr(self.engine, "model_path", None)
        return model_names.model_id(path) if path else str(self.engine.model_id)

    def save_session(self, name: str, ctx: int, n_tokens: int | None = None) -> dict:
        """Saves context `ctx`'s history under `name`: all of it, or its first `n_tokens` (a save by conversation:
        the part of the context that is the conversation named, server/history_save.py)."""
        name = validate_session_name(name)
        held = tokens_array(self.engine.context_tokens(ctx))
        if n_tokens is not None and not 0 < n_tokens <= held.shape[0]:
            raise ValueError(f"context {ctx} holds {held.shape[0]} tokens: cannot save its first {n_tokens!r}")
        tokens = held if n_tokens is None else held[:n_tokens]
        if tokens.shape[0] == 0:
            raise ValueError(f"context {ctx} is empty: nothing to save")
        c = self.config
        # a prefix's KV is its share of the context's (every token's KV is the same size)
        snapshot_bytes = self.engine.context_bytes(ctx) * tokens.shape[0] / held.shape[0]
        adm = policy.place_disk_io(self.memory.available_mib(), snapshot_bytes / MIB,
                                   c.conversation_cache_min_free_mib, c.conversation_cache_park_min_free_mib,
                                   "session_save")
        self._admit(adm, "session_save", "save")
        if adm.destination != policy.DISK:
            raise MemoryError(adm.reason)
        lvl = self.sessions.ensure_open()
        save = SaveUnderWay(name, int(snapshot_bytes))
        # held while the files are written: a DELETE waits for it, a stop's close waits for it while it is written
        # and gives it up when it hangs (cache.close); not the cache's lock, which the close then needs
        with self.session_writes:
            with self._lock:
                if name in self.deleting:
                    raise SessionBeingDeletedError(name)
                twin = self.sessions.case_twin(name)
                if twin is not None:
                    raise SessionConflictError(name, twin)
                # before writing: a save of gigabytes the budget refuses anyway is not written first (its KV's size
                # is close to its image's; the exact check is made once its files are written, below)
                self._make_room(name, int(snapshot_bytes), drop=False)
                self.saving = save
            try:
                def ready(entry: DiskEntry) -> None:
                    _still_wanted(save)
                    with self._lock:
                        self._make_room(name, entry.n_bytes, drop=True)

                e = lvl.write(self.sessions.key_of(name), "session", tokens,
                              _counted(self.engine.snapshot_chunks(ctx, n_tokens), save), self.clock(),
                              meta={"model": self.model_name}, ready=ready,
                              committing=lambda entry: self._still_fits(name, entry.n_bytes))
            finally:
                self.saving = None
            self.sessions.touch(e)   # used now (the budget's least-recently-used order)
            with self._lock:
                lvl.add(e)
                older = [name] if name in self.sessions.own_keys(name) else []   # this model's, saved before tags
                lvl.entries.pop(name, None)
            moved = self._move_older(name, older)
            self.sessions.folder_bytes()
        # removed after every lock, as a DELETE's files are: one that hangs held session_writes, and with it this
        # save's answer, every other save and DELETE, and the stop's wait for a save (cache._wait_for_save), for ever
        self._remove_moved_files(name, moved)
        return {"name": name, "model": self.model_name, "n_tokens": e.n_tokens, "bytes": e.image_bytes,
                "floor": adm.floor}

    def check_session_room(self, name: str, n_tokens: int) -> None:
        """Before a save by conversation reads a parked history back into an idle context (history_save.py): whether
        the sessions folder's budget takes a save of `name` holding `n_tokens` tokens, as save_session's first check
        weighs it (their KV's size). SessionsFolderFullError (a 507) when it does not: refused before the read back,
        the context keeps what it held. Nothing is deleted here (when-full evict drops saves only once written)."""
        name = validate_session_name(name)
        need = int(n_tokens * self.engine.bytes_per_token)
        self.sessions.ensure_open()
        with self._lock:
            self._make_room(name, need, drop=False)

    def _make_room(self, name: str, need_bytes: int, *, drop: bool) -> None:
        """Check that a save of `name` taking `need_bytes` fits the sessions folder's budget (session_budget.py; the
        caller holds the cache's lock); SessionsFolderFullError when it does not. With `drop` (its files are written,
        not yet in place) the least recently used saves the when-full setting drops are deleted first, each warned
        of; an OSError deleting one refuses the save (those deleted stay deleted)."""
        c = self.config
        budget = c.conversation_cache_sessions_mib * MIB
        if budget == 0:
            return
        store, lvl = self.sessions, self.sessions.level
        replaced = set(store.own_keys(name))   # the name's save this one replaces, and one saved before tags
        # what the folder holds of them, not what the index does: an older Strata's save of the name, which a
        # rebuild saves again, is no entry (counted as staying, its rebuild was refused, or evicted another save)
        used, replaced_bytes = store.measure(replaced) or (store.used_bytes, 0)
        store.used_bytes = used
        when_full = c.conversation_cache_sessions_when_full
        decision = plan_session_room(used, need_bytes, replaced_bytes, budget, when_full, ())
        if not decision.fits and when_full == "evict":   # only then each save's last use is read (a stat each)
            # weighed as the folder holds them, not as this server indexed them: a save another server sharing the
            # folder deleted since was 'dropped' (warned of, counted, freeing nothing), one it saved never weighed
            store.refresh(skip=set(self.deleting))
            own = [SavedSession(k, e.n_bytes, store.used_at(e)) for k, e in list(lvl.entries.items())
                   if k not in replaced and split_key(k)[0] not in self.deleting]
            decision = plan_session_room(used, need_bytes, replaced_bytes, budget, when_full, own)
        if not decision.fits:
            self.sessions.refusals += 1
            raise SessionsFolderFullError(self._full_text(name, used, need_bytes, decision.reason))
        if not drop:
            return
        for key in decision.drop:
            e = lvl.forget(key)
            self.sessions.evictions += 1
            log.warning("sessions folder: session %s (%.1f MiB) deleted to make room for the save of %s: the folder "
                        "holds %.1f of its %d MiB budget and --conversation-cache-sessions-when-full is evict (the "
                        "least recently saved or restored goes first)", split_key(key)[0],
                        (e.n_bytes if e else 0) / MIB, name, used / MIB, c.conversation_cache_sessions_mib)
        if decision.drop:
            store.folder_bytes()

    def _still_fits(self, name: str, need_bytes: int) -> None:
        """The last check of a save of `name` against the sessions folder's budget, made under the folder's commit
        lock just before its renames (DiskLevel.write's `committing`): against the folder as it is then, which
        another server sharing it may have filled since `_make_room` (its saves do not wait for this one's
        session_writes): two saves racing for the last room both went in, the folder past its budget. Nothing is
        deleted here (evicting needs the cache's lock, never taken under the commit lock): SessionsFolderFullError."""
        c = self.config
        budget = c.conversation_cache_sessions_mib * MIB
        if budget == 0:
            return
        store = self.sessions
        measured = store.measure(set(store.own_keys(name)))
        if measured is None:   # the folder cannot be read: the renames that follow fail with their own error
            return
        used, replaced_bytes = measured
        decision = plan_session_room(used, need_bytes, replaced_bytes, budget, "reject", ())
        if not decision.fits:
            store.used_bytes = used
            store.refusals += 1
            raise SessionsFolderFullError(self._full_text(
                name, used, need_bytes, "the folder took more while this save was written (another server sharing it "
                                        "saved there meanwhile?)"))

    def _full_text(self, name: str, used: int, need: int, why: str) -> str:
        c = self.config
        evict = "" if c.conversation_cache_sessions_when_full == "evict" else \
            ", or set --conversation-cache-sessions-when-full evict to delete the least recently used saves to make room"
        return (f"session {name!r} not saved: the sessions folder {self.sessions.level.folder} "
                f"(--conversation-cache-sessions-dir, where named session saves are kept) holds {used / MIB:.1f} MiB of "
                f"its {c.conversation_cache_sessions_mib} MiB budget (--conversation-cache-sessions-mib) and this save "
                f"needs {need / MIB:.1f} MiB: {why}. Free room by deleting saves you no longer need (DELETE "
                f"/v1/sessions/NAME; GET /v1/sessions lists them), raise --conversation-cache-sessions-mib{evict}; "
                "a session saved before under this name is kept as it was")

    def _move_older(self, name: str, keys: list[str]) -> list[str]:
        """Move this model's files of `name` saved before sessions were per model out of the way, once its own save is
        in place (it is what a restore reads from now on); returns the names they were moved to. One that cannot be
        moved is warned of: never read while the new one stands (a restore reads this model's own first); a DELETE
        removes both."""
        if not keys:
            return []
        try:
            return self.sessions.move_out(keys)
        except OSError as exc:
            log.warning("sessions folder: %s saved, but its earlier files (saved before sessions were per model) "
                        "cannot be removed (%s); they are not read while this save stands", name, exc.strerror or exc)
            return []

    def _remove_moved_files(self, name: str, moved: list[str]) -> None:
        """Remove the files `_move_older` moved, on a daemon thread of their own, waiting at most REMOVAL_WAIT_S for
        it: one whose removal hangs (a network folder, a multi-GiB image a scanner holds) goes on there, and the
        next start removes what is left."""
        if not moved:
            return
        thread = threading.Thread(target=self.sessions.remove_moved, args=(name, moved), daemon=True,
                                  name="strata-session-replaced")
        thread.start()
        thread.join(REMOVAL_WAIT_S)
        if thread.is_alive():
            log.warning("sessions folder: %s saved, but the removal of its earlier files, moved out of the way, has "
                        "not ended in %.0f s; it goes on (the next start removes what is left)", name, REMOVAL_WAIT_S)

    def history_holders(self, tokens) -> list[tuple[str, str, int, int]]:
        """(level, key, how many of `tokens` it holds from the start, its tokens) of each parked conversation (the
        RAM level and its spill queue are "ram", then each disk level): where a session saved by conversation finds
        a history no context holds any more. The segment and system-prompt stores hold shared prefixes, not
        conversations, and are not asked."""
        want = tokens_array(tokens)
        with self._lock:
            stores = [(lvl.name, lvl.entries) for lvl in self.cascade.levels] + [("ram", self._pending)]
            return [(level, e.key, common_prefix_len(e.tokens, want), int(e.n_tokens))
                    for level, entries in stores for e in entries.values()]

    def conversation_holders(self, conversation: str) -> list[tuple[str, str, list[int], float]]:
        """(level, key, its tokens, when it was parked) of each parked conversation recorded under conversation key
        `conversation` (the key its context's requests ran under: the entry's meta, kept in its sidecar; an entry
        written before keys were recorded has none and is found by its tokens only, history_holders). Levels as
        history_holders'; when it was parked is its created_at (kept as it moves down the levels)."""
        with self._lock:
            stores = [(lvl.name, lvl.entries) for lvl in self.cascade.levels] + [("ram", self._pending)]
            return [(level, e.key, e.tokens.tolist(), float(e.created_at)) for level, entries in stores
                    for e in list(entries.values()) if conversation and e.meta.get("conversation") == conversation]

    def has_session(self, name: str) -> bool:
        """Whether a session of this name is saved, by this version or an older one (asked before a restore
        touches the context); StaleSessionError for an older one whose sidecar does not check."""
        name = validate_session_name(name)
        store = self.sessions
        store.ensure_open()
        with self._lock:
            if name in self.deleting:
                return False
            for key in (store.key_of(name), name):   # deleted by another server sharing the folder since indexed
                store.gone_since(key)
            return (store.entry(name) is not None or store.found_since(name) is not None
                    or store.stale_entry(name) is not None)

    def session_to_rebuild(self, name: str) -> np.ndarray | None:
        """The token ids of session `name` when an older Strata saved it (its KV is to be read again from them),
        None when this version saved it or there is none; StaleSessionError when its sidecar does not check."""
        name = validate_session_name(name)
        self.sessions.ensure_open()
        with self._lock:
            entry = None if self.sessions.entry(name) is not None else self.sessions.stale_entry(name)
        return None if entry is None else entry.tokens

    def restore_session(self, name: str, ctx: int) -> RestoreResult:
        """Restore a session this version saved (an older one's is rebuilt from its tokens by the server:
        session_to_rebuild)."""
        name = validate_session_name(name)
        lvl = self.sessions.ensure_open()
        with self._lock:
            entry = self.sessions.entry(name)
            if entry is None and name not in self.deleting:
                entry = self.sessions.found_since(name)   # saved since indexed (another server sharing the folder)
            if entry is None:
                raise self.missing_session_error(name)
            result = self._restore_disk(lvl, entry, ctx, entry.n_tokens, "session_restore", time.perf_counter(),
                                        discard_damaged=False)
        if result.n_tokens:
            self.sessions.touch(entry)   # used now: the budget's evict drops the least recently used first
        return result

    def missing_session_error(self, name: str) -> Exception:
        """What a restore of `name`, which this model has no session of, raises: SessionOfAnotherModelError when
        another model saved one (a 409 naming it), else a KeyError (a 404) saying what missing_session says."""
        other = self.sessions.other_model(name)
        if other is not None:
            return SessionOfAnotherModelError(name, other, self.model_name)
        return KeyError(self.missing_session(name))

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
        removal = self.start_delete(name)   # SessionOfAnotherModelError: only another model's is saved
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
                # this model's files of it as listed, exactly: on Windows and macOS another case's name opens the
                # same files; another model's are its own (a 409 names that model)
                keys = self.sessions.own_keys(name)
                if not keys:
                    other = self.sessions.other_model(name)
                    if other is not None:
                        raise SessionOfAnotherModelError(name, other, self.model_name)
                    return None
                removal = self.deleting[name] = SessionRemoval(name, keys, {k: lvl.entries.pop(k) for k in keys
                                                                            if k in lvl.entries})
        finally:
            self.session_writes.release()
        threading.Thread(target=self._remove_session, args=(lvl, removal), name="strata-session-delete",
                         daemon=True).start()   # a daemon: one that hangs does not hold the process's end
        return removal

    def _remove_session(self, lvl: DiskLevel, removal: SessionRemoval) -> None:
        moved: list[str] = []
        try:
            moved = self.sessions.move_out(removal.keys)
        except OSError as exc:
            removal.error = exc
        finally:
            with self._lock:
                del self.deleting[removal.name]
                if removal.error is not None:
                    for key, entry in removal.entries.items():   # a sidecar that stands: still an entry
                        if key not in lvl.entries and os.path.exists(entry.sidecar_path):
                            lvl.entries[key] = entry
            removal.done.set()
        try:
            self.sessions.remove_moved(removal.name, moved)   # outside every lock: one that hangs holds nothing
            self.sessions.folder_bytes()
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
        """This model's sessions (another model's are not restorable here), each with the model that saved it."""
        with self._lock:
            self.sessions.refresh(skip=set(self.deleting))   # what servers sharing the folder saved and deleted since
            self.sessions.folder_bytes()
            rows = [s for s in self.sessions.list() if s["name"] not in self.deleting]
        for s in rows:
            s["model"] = s["model"] or self.model_name   # saved before sessions recorded it: this model's all the same
        return rows
