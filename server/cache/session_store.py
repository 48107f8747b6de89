"""The sessions folder: which of its files are this model's sessions, and under which names.

What this is: the folder as a DiskLevel (opened on first use) and the rule that makes sessions per model. A session
is `strata-session-<name>~<tag>.json` + `strata-session-<name>~<tag>@<generation>.img`, `<tag>` 8 hex digits of the
model's identity (its GGUF header's hash and the KV layout: model_tag), so two models' sessions of one name are two
sessions: a save of `work` under model B no longer replaces the `work` model A saved (the wizard offers several
models; an agent saving under each overwrote the other's, or removed its image). Another model's sidecar is skipped
as foreign at open, as before; `other_model` reads it when a name is missing here, so a restore or DELETE can say
which model saved it. A session saved before models had their own names (`strata-session-<name>.json`, which an
older Strata on the folder still writes) is read as this model's when its sidecar's identity is this model's, never
touched by another model, and replaced by this model's next save of that name (the new sidecar in place, the older
files removed after it). Also the DELETE's moves: a session's files renamed out of the way under the commit lock,
removed after it. What this is not: the session operations (sessions.py) or the file format (disk.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass

from .disk import GENERATION_MARK, DiskEntry, DiskLevel, Identity, _Foreign, _Stale
from .fileio import FileIO
from .temp_files import TEMP_SUFFIX, temp_name

log = logging.getLogger("strata.cache")

SESSION_PREFIX = "strata-session-"
MODEL_MARK = "~"   # <name>~<tag>: never in a session name (validate_session_name), nor in a conversation's hex key
TAG_DIGITS = 8     # 2**32 tags: two models sharing one is one in 4 billion, and their files still check identity


def model_tag(identity: Identity) -> str:
    """The model's mark in its session files' names (8 hex digits of its model id and KV layout)."""
    h = hashlib.blake2b(f"{identity.model_id}\0{identity.kv_layout}".encode(), digest_size=TAG_DIGITS // 2)
    return h.hexdigest()


def split_key(key: str) -> tuple[str, str | None]:
    """A file key as (session name, model tag); the tag is None for a session saved before tags."""
    name, mark, tag = key.partition(MODEL_MARK)
    return name, (tag if mark else None)


@dataclass(frozen=True)
class OtherModelsSession:
    """A session of the name asked for that another model saved: what a restore or DELETE says of it."""

    name: str
    model: str | None        # the model's name as its server recorded it (none before sessions recorded it)
    model_id: str            # its GGUF header's SHA-256
    same_model: bool         # this model's file, another KV layout (another --kv-type)

    def says(self) -> str:
        if self.same_model:
            return "this model with another KV cache layout (another --kv-type)"
        named = f"model {self.model!r}" if self.model else "another model"
        return f"{named} (model id {self.model_id[:12]})"


class StaleSessionError(Exception):
    """A session an older Strata saved whose sidecar does not check (its tokens' hash, a field): never
    trusted, so not rebuilt either; kept on disk (the user saved it). The message says why and what to do."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"session {name!r} was saved by an older Strata and its sidecar is damaged ({why}): its "
                         "tokens cannot be trusted to rebuild it; save it again (DELETE removes the old one)")


class SessionStore:
    def __init__(self, folder: str, identity: Identity, *, io: FileIO | None = None,
                 piece_bytes: int | None = None) -> None:
        kwargs = {"piece_bytes": piece_bytes} if piece_bytes else {}
        self.level = DiskLevel("sessions", folder, 0, 0.0, identity, io=io, prefix=SESSION_PREFIX,
                               versioned_images=True, **kwargs)
        self.tag = model_tag(identity)
        # the folder's committed session files' bytes as last measured (folder_bytes): what /metrics, the monitor
        # and the INFO line show, read on the event loop without scanning the folder there
        self.used_bytes = 0
        self.evictions = 0   # saves deleted to make room for another (--conversation-cache-sessions-when-full evict)
        self.refusals = 0    # saves refused: the folder's budget (--conversation-cache-sessions-mib) was full
        self._opened = False
        # the first save (the worker thread) and a first list or DELETE (the event loop's executor) both indexed
        # the folder: the one that finished last could drop the other's new entry until a restart
        self._opening = threading.Lock()
        self.folder_bytes()   # its use at start-up (the INFO line, /metrics), without indexing it (that is at first use)

    def ensure_open(self) -> DiskLevel:
        if self._opened:
            return self.level
        with self._opening:
            if self._opened:
                return self.level
            self.level.open()
            self._opened = True
            self.folder_bytes()
            for name, why in self.level.swept:   # a save given up at a stop, or killed: its part, never an entry
                log.info("sessions folder: removed %s, a temporary file left by a save or a DELETE that did not "
                         "finish (%s)", os.path.join(self.level.folder, name), why)
            for name in self.level.removed_files:
                log.info("sessions folder: removed %s, an image no sidecar names (a save that failed or was stopped "
                         "before its sidecar was in place, or an earlier save's image left behind)",
                         os.path.join(self.level.folder, name))
        return self.level

    # -- the folder's use -----------------------------------------------------------------------

    def folder_bytes(self) -> int:
        """The bytes of every committed session file in the folder (sidecars and images of every model and version,
        damaged ones too: the disk the budget bounds), remembered in `used_bytes`. Temporary files are writes or
        DELETEs under way, not counted. A folder not there (not made yet) holds 0; one that cannot be read keeps
        the last measure."""
        measured = self.measure()
        if measured is not None:
            self.used_bytes = measured[0]
        return self.used_bytes

    def measure(self, keys: Collection[str] = ()) -> tuple[int, int] | None:
        """(the bytes of every committed session file in the folder, the part that is the files of `keys`: the
        save a new one replaces, whether the index holds it or not: an older Strata's is no entry), as the folder
        holds them now; None when it cannot be read. A folder not there holds (0, 0)."""
        total = of_keys = 0
        try:
            with os.scandir(self.level.folder) as it:
                for f in it:
                    if not f.name.startswith(self.level.prefix) or f.name.endswith(TEMP_SUFFIX) \
                            or not f.name.endswith((".json", ".img")):
                        continue
                    try:
                        if not f.is_file(follow_symlinks=False):
                            continue
                        size = f.stat(follow_symlinks=False).st_size
                    except OSError:   # removed since the listing
                        continue
                    total += size
                    if keys and self._file_key(f.name) in keys:
                        of_keys += size
        except FileNotFoundError:
            return 0, 0
        except OSError:
            return None
        return total, of_keys

    def _file_key(self, file_name: str) -> str:
        """The key a session file of the folder belongs to (its sidecar's, each of its images')."""
        return file_name[len(self.level.prefix):].rsplit(".", 1)[0].split(GENERATION_MARK, 1)[0]

    @staticmethod
    def used_at(entry: DiskEntry) -> float:
        """When a save was last saved or restored: its sidecar's modification time (a restore touches it), else its
        seal."""
        try:
            return os.stat(entry.sidecar_path).st_mtime
        except OSError:
            return entry.sealed_at

    @staticmethod
    def touch(entry: DiskEntry) -> None:
        """Mark a save used now (saved, restored), for the budget's least-recently-used order; best effort (a
        read-only folder leaves its order as it was). The time is given, not left to the file system: its own is
        the kernel's coarse clock (a tick of some milliseconds), and two uses within one tick tied."""
        now = time.time()
        try:
            os.utime(entry.sidecar_path, (now, now))
        except OSError:
            pass

    # -- names and keys -------------------------------------------------------------------------

    def key_of(self, name: str) -> str:
        """The key (file stem) this model saves session `name` under."""
        return f"{name}{MODEL_MARK}{self.tag}"

    def keys_listed(self) -> set[str]:
        """The keys whose files the folder lists, spelled as listed (sidecars, images, each generation)."""
        lvl = self.ensure_open()
        try:
            names = os.listdir(lvl.folder)
        except OSError:
            return set(lvl.entries)
        return {self._file_key(n) for n in names if n.startswith(lvl.prefix) and n.endswith((".json", ".img"))}

    def entry(self, name: str) -> DiskEntry | None:
        """This model's session `name` as indexed: its own save, else one saved before tags (indexed only when its
        sidecar's identity is this model's)."""
        entries = self.ensure_open().entries
        return entries.get(self.key_of(name)) or entries.get(name)

    def found_since(self, name: str) -> DiskEntry | None:
        """This model's session `name` when the index lacks it but the folder holds it: saved since the folder was
        indexed (by another server sharing it; or the folder was not there at first use: a file in its place, a
        disk not mounted yet). Its sidecar is checked as at open (its image there, of the size it says) and the
        entry indexed; None when there is none, or its files do not check (never trusted; not counted here: the
        next start skips them as it does any). Before, such a session was a 404 and unlisted until a restart."""
        lvl = self.ensure_open()
        key = self.key_of(name)
        if key in lvl.entries:
            return lvl.entries[key]
        try:
            entry = lvl.read_sidecar(key)
            if os.path.getsize(entry.image_path) != entry.image_bytes:
                return None
        except (_Foreign, _Stale, OSError, ValueError, KeyError, TypeError, ArithmeticError, RecursionError):
            return None
        lvl.add(entry)
        log.info("sessions folder: %s found, saved since this server indexed %s (another server sharing the folder, "
                 "or the folder was not there then)", name, lvl.folder)
        return entry

    def gone_since(self, key: str) -> bool:
        """Whether indexed session `key`'s sidecar is no longer in the folder (a DELETE by another server sharing
        it: the sidecar goes first); then it is unindexed. A folder that cannot be read tells nothing: False."""
        lvl = self.level
        if key not in lvl.entries or os.path.exists(lvl.sidecar_path(key)) or not os.path.isdir(lvl.folder):
            return False
        lvl.entries.pop(key, None)
        log.info("sessions folder: %s was deleted since this server indexed %s (another server sharing the folder); "
                 "unlisted", split_key(key)[0], lvl.folder)
        return True

    def refresh(self, skip: set[str] | frozenset[str] = frozenset()) -> None:
        """Bring the index in step with the folder's sidecars (what other servers sharing it saved and deleted since
        it was indexed), names in `skip` (this server's DELETEs under way) left alone."""
        lvl = self.ensure_open()
        try:
            listed = os.listdir(lvl.folder)
        except OSError:
            return
        tagged = {n[len(lvl.prefix):-len(".json")] for n in listed if n.startswith(lvl.prefix) and n.endswith(".json")}
        for key in sorted(set(lvl.entries) | tagged):
            name, tag = split_key(key)
            if name in skip:
                continue
            if key in lvl.entries:
                self.gone_since(key)
            elif tag == self.tag:
                self.found_since(name)

    def own_keys(self, name: str) -> list[str]:
        """The keys of this model's files of exactly `name` (a DELETE removes them): its own, and one saved before
        tags unless its sidecar is another model's (a damaged one is no model's: removed, as before)."""
        lvl = self.ensure_open()
        listed = self.keys_listed()
        keys = [k for k in (self.key_of(name),) if k in listed or k in lvl.entries]
        if name in lvl.entries or (name in listed and self._untagged_is_ours(name)):
            keys.append(name)
        return keys

    def _untagged_is_ours(self, name: str) -> bool:
        try:
            self.level.read_sidecar(name, older=True)
        except _Foreign:   # another model's (or a newer Strata's): never touched here
            return False
        except (OSError, ValueError, KeyError, TypeError, ArithmeticError, RecursionError):
            return True    # damaged, or images without a sidecar: no model's session, removed as before
        return True

    def names(self) -> set[str]:
        """This model's session names: its own files as listed or indexed, and those saved before tags it indexed
        (or skipped as an older engine's)."""
        lvl = self.ensure_open()
        stale = set(self._stale_keys())
        out = set()
        for key in self.keys_listed() | set(lvl.entries):
            name, tag = split_key(key)
            if tag == self.tag or (tag is None and (key in lvl.entries or key in stale)):
                out.add(name)
        return out

    def case_twin(self, name: str) -> str | None:
        """This model's saved session whose name differs from `name` only in case (None when `name` itself is
        there, as two sessions an older Strata saved on a file system that tells case apart may be)."""
        mine = self.names()
        if name in mine:
            return None
        return next((k for k in sorted(mine) if k.lower() == name.lower()), None)

    def other_model(self, name: str) -> OtherModelsSession | None:
        """A session of exactly `name` that another model saved (its sidecar, as listed now), or None."""
        lvl = self.ensure_open()
        ours = {self.key_of(name), *([name] if name in lvl.entries else [])}
        for key in sorted(self.keys_listed()):
            if key in ours or split_key(key)[0] != name:
                continue
            try:
                with open(lvl.sidecar_path(key), "rb") as f:
                    d = json.loads(f.read())
                model_id, kv_layout = str(d["model_id"]), str(d["kv_layout"])
            except (OSError, ValueError, KeyError, TypeError, RecursionError):   # gone, damaged: no model's
                continue
            if Identity(model_id, kv_layout) == lvl.identity:   # this model's, of an older engine: not another's
                continue
            model = (d.get("meta") or {}).get("model") if isinstance(d.get("meta"), dict) else None
            return OtherModelsSession(name, model if isinstance(model, str) else None, model_id,
                                      model_id == lvl.identity.model_id)
        return None

    # -- sessions an older Strata saved -------------------------------------------------------

    def _stale_keys(self) -> list[str]:
        lvl = self.level
        return sorted(n[len(lvl.prefix):-len(".json")] for n, reason, _ in lvl.skipped_files if reason == "stale")

    def _key_is_stale(self, key: str) -> bool:
        lvl = self.ensure_open()
        return (key not in lvl.entries and key in self._stale_keys() and os.path.exists(lvl.sidecar_path(key)))

    def stale_key(self, name: str) -> str | None:
        """The key of `name`'s files when they are still there and were skipped at open as an older engine's (and
        this version has not saved it again since); this model's own first, then one saved before tags."""
        return next((k for k in (self.key_of(name), name) if self._key_is_stale(k)), None)

    def is_stale(self, name: str) -> bool:
        return self.stale_key(name) is not None

    def stale_names(self) -> list[str]:
        self.ensure_open()
        names = {split_key(k)[0] for k in self._stale_keys() if split_key(k)[1] in (self.tag, None)}
        return [n for n in sorted(names) if self.is_stale(n)]

    def stale_entry(self, name: str) -> DiskEntry | None:
        """The sidecar of `name` when it is an older Strata's (None when it is not, or gone): its token ids checked
        against their hash; StaleSessionError when they do not check (damaged: never trusted)."""
        key = self.stale_key(name)
        if key is None:
            return None
        try:
            return self.level.read_sidecar(key, older=True)
        except FileNotFoundError:    # deleted since the index
            return None
        except (OSError, ValueError, KeyError, TypeError, ArithmeticError, RecursionError) as exc:
            raise StaleSessionError(name, f"{type(exc).__name__}: {exc}") from None

    def list(self) -> list[dict]:
        """This model's sessions, one a name (its own save before one saved before tags), with the model's name as
        recorded (None before sessions recorded it: the caller says this server's)."""
        lvl = self.ensure_open()
        out: dict[str, dict] = {}
        for key, e in sorted(lvl.entries.items(), key=lambda kv: split_key(kv[0])[1] is None):
            name = split_key(key)[0]
            out.setdefault(name, _row(name, e, needs_rebuild=False))
        for name in self.stale_names():
            if name in out:
                continue
            try:
                e = self.stale_entry(name)
            except StaleSessionError:    # damaged: not listed, as a damaged session of today is not
                continue
            if e is not None:
                out[name] = _row(name, e, needs_rebuild=True)
        return [out[n] for n in sorted(out)]

    # -- a DELETE's moves -----------------------------------------------------------------------

    def move_out(self, keys: list[str]) -> list[str]:
        """A DELETE's first step: the files of `keys` renamed out of the way, each key's sidecar first, under the
        folder's commit lock (never between another server's image and its sidecar), to temporary names of this
        process that no reader takes for an entry and a later start removes; returns those names. The index is left
        alone (the caller unindexed it). OSError when a sidecar cannot be moved: that session stands. Their removal
        (remove_moved) comes after the lock: one that hangs (a network folder, a multi-GiB image an antivirus scans)
        held the lock, and every other save in the folder, this server's and another's, waited COMMIT_LOCK_WAIT_S
        for it and failed (507)."""
        lvl = self.level
        moved: list[str] = []
        with lvl.io.commit_lock(lvl.folder):
            for key in keys:
                moved += self._move_out(key)
        return moved

    def remove_moved(self, name: str, moved: list[str]) -> None:
        """Remove the files move_out moved, outside every lock; one that cannot be removed is warned of (the session
        is gone: the next start removes what is left)."""
        lvl = self.level
        for path in moved:
            try:
                lvl.io.remove(path)
            except OSError as exc:
                lvl.remove_failures += 1
                log.warning("sessions folder: %s deleted, but %s, its file moved out of the way, cannot be removed "
                            "(%s); the next start removes it", name, path, exc.strerror or exc)

    def _move_out(self, key: str) -> list[str]:
        """Rename the sidecar, then every image of `key`, to temporary names (the caller holds the commit lock);
        returns those names. A folder standing in a file's place is left alone (the cache moves only what it
        wrote). OSError when the sidecar cannot be moved; an image that cannot be is warned of, never read again."""
        lvl = self.level
        name = split_key(key)[0]
        paths = [lvl.sidecar_path(key)]
        try:
            paths += [os.path.join(lvl.folder, n) for n in lvl.images_of(key)]
        except OSError as exc:
            log.warning("sessions folder: %s deleted, but its folder cannot be listed to remove its images (%s); the "
                        "next start removes them", name, exc.strerror or exc)
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
                            "it", name, os.path.basename(path), exc.strerror or exc)
                continue
            moved.append(out)
        return moved


def _row(name: str, e: DiskEntry, *, needs_rebuild: bool) -> dict:
    model = e.meta.get("model")
    return {"name": name, "model": model if isinstance(model, str) else None, "n_tokens": e.n_tokens,
            "bytes": e.image_bytes, "created_at": e.created_at, "needs_rebuild": needs_rebuild}
