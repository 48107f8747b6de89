"""One disk level of the conversation cache: image files, their sidecars, and the index of both.

What this is: files named `<prefix><key>.img` (the engine's snapshot image, byte for byte) beside
`<prefix><key>.json` (the sidecar: identity, token ids, sizes, per-piece CRC32, created and sealed
times). A write goes to a temporary name of its own (temp_files.py), is flushed and fsynced; then
the image and the sidecar are renamed into place under the folder's commit lock, the sidecar last,
so a file without its sidecar is never an entry and two writers of one key never mix their files.
A level of named sessions (`versioned_images`) writes each save's image under a name of its own
(`<prefix><key>@<generation>.img`) that its sidecar records: the sidecar's rename is the one step that
replaces the earlier save, so a save that fails at any point (Windows refusing the rename of a file
another program holds open, a crash) leaves the earlier image and sidecar whole, and a sidecar never
describes another save's image. The earlier image is removed once the new sidecar is in place.
Leftover temporary files of writers that stopped are removed at open. At open the folder is indexed from its files
and nothing is rewritten; a foreign, truncated or damaged file is skipped and counted, never
trusted (damaged_files.py then removes the skipped files Strata wrote). What this is not: the cascade (cascade.py decides what moves where) or a budget enforcer.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import mmap
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
from strata._engine import crc32  # zlib.crc32 bit for bit, native, no GIL on big buffers
from strata.engine.snapshot import KV_REVISION

from strata import folders

from .fileio import CommitLockHeld, FileIO, stage_move
from .temp_files import TEMP_SUFFIX, abandoned, temp_name

log = logging.getLogger("strata.cache")

PIECE_BYTES = 16 << 20  # the streamed-restore piece (seed 002: "copies 16 MiB at a time")
CONV_PREFIX = "strata-conv-"
SIDECAR_FORMAT = "strata-conv-sidecar"
SIDECAR_VERSION = 1
# Why an index skipped a file; every one is counted and none is trusted.
LAST_TIME = 253402300800.0  # 10000-01-01 UTC: a sealed or created time at or past it is damage, not a date
SKIP_REASONS = ("foreign", "stale", "damaged", "orphan_sidecar", "orphan_image", "partial", "unreadable")


def _unreadable_detail(which: str, exc: OSError) -> str:
    """Why a file this server may not read is skipped and kept: its permissions, not its bytes (a server run once
    as another user, with sudo, left files this one cannot read). Removed as damage, as it was (an unreadable
    sidecar took its image with it; an unreadable image was deleted at its restore), a history lost for good."""
    return (f"its {which} cannot be read ({exc.strerror or exc}): left as it is; make the files readable to the "
            "user the server runs as, and restart, to use it")


UNRECORDED_KV_REVISION = 1  # a sidecar without `kv_revision`: written before it was recorded (an older engine)
# a sidecar's widest token id with its comma ("-2147483648,": an int32), and its widest time (a float's longest repr)
TOKEN_ID_BYTES_AT_MOST = 12
WIDEST_TIME = -2.2250738585072014e-308
GENERATION_MARK = "@"  # <prefix><key>@<generation>.img: never in a key (session names and hex keys have no '@')


@dataclass(frozen=True)
class Identity:
    """Which engine state a file belongs to: the model and the KV layout."""

    model_id: str
    kv_layout: str


def tokens_array(tokens: Iterable[int]) -> np.ndarray:
    return np.ascontiguousarray(np.fromiter(tokens, dtype=np.int32) if not isinstance(tokens, np.ndarray)
                                else tokens.astype(np.int32, copy=False))


def tokens_hash(tokens: np.ndarray) -> str:
    return hashlib.blake2b(tokens_array(tokens).tobytes(), digest_size=16).hexdigest()


def conversation_key(identity: Identity, tokens: np.ndarray) -> str:
    """Key of the state of exactly these tokens for this model and layout."""
    h = hashlib.blake2b(digest_size=16)
    h.update(identity.model_id.encode())
    h.update(b"\0" + identity.kv_layout.encode() + b"\0")
    h.update(tokens_array(tokens).tobytes())
    return h.hexdigest()


@dataclass
class DiskEntry:
    key: str
    kind: str  # "conversation" | "segment" | "system_prompt" | "session"
    tokens: np.ndarray  # (n_tokens,) int32: the history the image holds
    image_bytes: int
    sidecar_bytes: int
    piece_bytes: int
    piece_crc32: tuple[int, ...]
    created_at: float
    sealed_at: float
    identity: Identity
    image_path: str
    sidecar_path: str
    meta: dict = field(default_factory=dict)
    sealed_by: str = ""   # the clock that sealed it (steady_clock.clock_id); "" in files written before it was kept

    @property
    def n_bytes(self) -> int:
        return self.image_bytes + self.sidecar_bytes

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.shape[0])

    def sidecar_dict(self) -> dict:
        return {
            "format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "kv_revision": KV_REVISION, "key": self.key,
            "kind": self.kind, "model_id": self.identity.model_id, "kv_layout": self.identity.kv_layout,
            "n_tokens": self.n_tokens, "tokens_hash": tokens_hash(self.tokens),
            "tokens": self.tokens.tolist(), "image_bytes": self.image_bytes,
            "piece_bytes": self.piece_bytes, "piece_crc32": list(self.piece_crc32),
            "created_at": self.created_at, "sealed_at": self.sealed_at, "meta": self.meta,
            **({"sealed_by": self.sealed_by} if self.sealed_by else {}),
        }


class _PieceChecksums:
    """CRC32 of each fixed-size piece of a byte stream fed in arbitrary sizes."""

    def __init__(self, piece_bytes: int) -> None:
        self.piece_bytes = piece_bytes
        self.crcs: list[int] = []
        self._crc = 0
        self._filled = 0
        self.total = 0

    def feed(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        self.total += len(view)
        while len(view):
            take = min(len(view), self.piece_bytes - self._filled)
            self._crc = crc32(view[:take], self._crc)
            self._filled += take
            view = view[take:]
            if self._filled == self.piece_bytes:
                self.crcs.append(self._crc)
                self._crc, self._filled = 0, 0

    def finish(self) -> tuple[int, ...]:
        if self._filled:
            self.crcs.append(self._crc)
            self._crc, self._filled = 0, 0
        return tuple(self.crcs)


class DiskLevel:
    """A folder of image + sidecar pairs, indexed at `open()`; budget 0 = unlimited (sessions)."""

    def __init__(self, name: str, folder: str, budget_bytes: int, max_age_s: float, identity: Identity,
                 *, io: FileIO | None = None, prefix: str = CONV_PREFIX, piece_bytes: int = PIECE_BYTES,
                 image_magic: bytes | None = None, versioned_images: bool = False, sealed_by: str = "") -> None:
        if piece_bytes <= 0:
            raise ValueError(f"piece_bytes must be > 0, got {piece_bytes!r}")
        if not isinstance(sealed_by, str):
            raise ValueError(f"sealed_by must be a string naming this clock, got {sealed_by!r}")
        self.sealed_by = sealed_by   # what the sidecars it seals name as their clock (steady_clock.clock_id)
        self.name = name
        self.folder = os.path.abspath(folder)
        self.budget_bytes = budget_bytes
        self.max_age_s = max_age_s
        self.identity = identity
        self.io = io or FileIO()
        self.prefix = prefix
        self.piece_bytes = piece_bytes
        self.entries: dict[str, DiskEntry] = {}
        self.skipped: Counter[str] = Counter()
        self.skipped_files: list[tuple[str, str, str]] = []  # (file name, reason, detail), for the log
        self.swept: list[tuple[str, str]] = []  # (file name, why): leftover temporary files removed at open
        self.image_magic = image_magic  # how an image Strata wrote begins (damaged_files.py tells its own by it)
        self.removed: Counter[str] = Counter()  # skipped files removed at open, by reason (damaged_files.py)
        self.removed_files: dict[str, str] = {}  # skipped file name -> what of it was removed, for the log
        self.unremovable_files: dict[str, str] = {}  # skipped file name -> why removing (some of) it failed
        self.changed_files: set[str] = set()  # skipped files another server removed or committed since the index
        self.vanished = 0  # entries whose folder was removed while the server ran (ensure_folder)
        self.remove_failures = 0  # files the cache could not remove (a read-only folder): cascade.forget_files
        self.removes_failing_since: int | None = None  # remove_failures when the current run of failures began
        self.sync_failing = False   # a folder sync failed and has not worked since (_sync_folder: warned once)
        self.versioned_images = versioned_images  # each write's image under a name of its own (named sessions)
        self.state = "closed"

    # -- paths ----------------------------------------------------------------------------------

    def image_path(self, key: str) -> str:
        return os.path.join(self.folder, f"{self.prefix}{key}.img")

    def sidecar_path(self, key: str) -> str:
        return os.path.join(self.folder, f"{self.prefix}{key}.json")

    def bytes_at_most(self, key: str, kind: str, n_tokens: int, image_bytes: int, meta: dict | None = None) -> int:
        """What this level counts for a history once written (DiskEntry.n_bytes: its image and its sidecar), at
        most: the sidecar as `_write_sidecar_temp` lays it out, its token ids, CRCs and times at their widest. Why: a
        plan that fitted the image bytes alone past a budget (a stop's hand-down) was over it by the sidecars, and a
        later write evicted one the plan kept. Costs no walk of the tokens (the monitor feed asks it)."""
        widest = DiskEntry(key=key, kind=kind, tokens=np.zeros(0, np.int32), image_bytes=image_bytes,
                           sidecar_bytes=0, piece_bytes=self.piece_bytes,
                           piece_crc32=(0xFFFFFFFF,) * -(-image_bytes // self.piece_bytes), created_at=WIDEST_TIME,
                           sealed_at=WIDEST_TIME, identity=self.identity, image_path=self.new_image_path(key),
                           sidecar_path=self.sidecar_path(key), meta=dict(meta or {}), sealed_by=self.sealed_by)
        d = widest.sidecar_dict() | {"n_tokens": n_tokens}
        if widest.image_path != self.image_path(key):
            d["image"] = os.path.basename(widest.image_path)
        return image_bytes + len(json.dumps(d, separators=(",", ":"))) + n_tokens * TOKEN_ID_BYTES_AT_MOST

    def new_image_path(self, key: str) -> str:
        """Where a write of `key` puts its image: a name no other write used on a level of versioned images."""
        if not self.versioned_images:
            return self.image_path(key)
        return os.path.join(self.folder, f"{self.prefix}{key}{GENERATION_MARK}{secrets.token_hex(8)}.img")

    def images_of(self, key: str) -> list[str]:
        """The file names of every image of `key` in the folder (the plain one and each generation's), as
        listed: exact names, so on a file system that ignores case another case's files are not among them."""
        plain, versioned = f"{self.prefix}{key}.img", f"{self.prefix}{key}{GENERATION_MARK}"
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:   # the folder was removed (by hand): no image of any key
            return []
        return sorted(n for n in names if n == plain or (n.startswith(versioned) and n.endswith(".img")))

    @property
    def used_bytes(self) -> int:
        # a copy first: /metrics and the monitor read this on the event loop, unlocked, while the spill
        # writer adds and removes entries ('dictionary changed size during iteration' lost the scrape)
        return sum(e.n_bytes for e in list(self.entries.values()))

    # -- index ----------------------------------------------------------------------------------

    def open(self) -> None:
        """Create the folder if needed and index it from its files; rewrites nothing."""
        try:
            os.makedirs(self.folder, folders.PRIVATE_FOLDER_MODE, exist_ok=True)
            names = os.listdir(self.folder)
        except FileExistsError:  # strerror 'File exists' did not say what is wrong
            self.state = "unavailable: a file is there, not a folder"
            return
        except OSError as exc:
            self.state = f"unavailable: {exc.strerror or exc}"
            return
        self.entries.clear()
        self.skipped.clear()
        self.skipped_files.clear()
        self.swept.clear()
        self.removed.clear()
        self.removed_files.clear()
        self.unremovable_files.clear()
        self.changed_files.clear()
        ours = [n for n in names if n.startswith(self.prefix)]
        image_files = {n for n in ours if n.endswith(".img")}
        generations = {n for n in image_files if self.versioned_images and GENERATION_MARK in n}
        images = {n[len(self.prefix):-4] for n in image_files - generations}
        sidecar_keys = set()
        for n in sorted(ours):
            if n.endswith(TEMP_SUFFIX):
                self._sweep_temp(n)
            elif n.endswith(".json"):
                key = n[len(self.prefix):-5]
                sidecar_keys.add(key)
                self._index_one(key, image_files)
        if not self.versioned_images:
            for key in sorted(images - sidecar_keys):
                self._skip(f"{self.prefix}{key}.img", "orphan_image", "an image without its sidecar")
        else:
            # an older Strata's plain image that no sidecar names (none of its key, or one naming a save's own image:
            # an upgrade's re-save or a DELETE that could not remove it, a file held open) is swept as an earlier
            # generation is: it is never read again
            plain = {f"{self.prefix}{key}.img" for key in images
                     if key not in self.entries or os.path.basename(self.entries[key].image_path)
                     != f"{self.prefix}{key}.img"}
            for n in sorted(generations | plain):
                self._sweep_generation(n)
        self.state = "on"

    def ensure_folder(self) -> None:
        """Before a write: a folder removed while the server ran (a user clearing the cache by hand) is
        made again, and the entries it held are forgotten (their files went with it; counting them would
        hold budget for nothing and evict live entries). Raises OSError when it cannot be made."""
        if os.path.isdir(self.folder):
            return
        os.makedirs(self.folder, folders.PRIVATE_FOLDER_MODE, exist_ok=True)
        lost = len(self.entries)
        self.entries.clear()
        self.vanished += lost
        log.warning("conversation cache %s level: its folder %s was removed while the server ran; made again "
                    "(%s)", self.name, self.folder,
                    "the 1 entry it held is gone" if lost == 1 else f"the {lost} entries it held are gone")

    def forget_vanished(self) -> int:
        """Unindex the entries whose sidecar is no longer there (removed by hand, by another server on this
        folder, with the whole folder); returns how many. The stop line then counts only what is kept."""
        gone = [k for k, e in self.entries.items() if not os.path.exists(e.sidecar_path)]
        for k in gone:
            del self.entries[k]
        self.vanished += len(gone)
        return len(gone)

    def _skip(self, name: str, reason: str, detail: str) -> None:
        self.skipped[reason] += 1
        self.skipped_files.append((name, reason, detail))

    def _sweep_temp(self, name: str) -> None:
        """Remove a temporary file its writer left (killed mid-write); skip, and keep, one another
        process may still be writing (temp_files.abandoned says which)."""
        path = os.path.join(self.folder, name)
        try:
            age = time.time() - os.stat(path).st_mtime
        except OSError:  # finished (renamed) by its writer since the listing
            return
        gone, why = abandoned(name, age)
        if gone:
            try:
                self.io.remove(path)
                self.swept.append((name, why))
                return
            except OSError as exc:
                why = f"{why}, but it cannot be removed ({exc.strerror or exc})"
        self._skip(name, "partial", f"a temporary file: {why}")

    def _sweep_generation(self, name: str) -> None:
        """An image of one save (`<prefix><key>@<generation>.img`) that the sidecar of its key does not name: left
        by a save that failed or stopped before its sidecar was renamed into place, or one whose earlier image could
        not be removed after it (Windows: a file another program held open). Never an entry's image, never read:
        removed under the commit lock (a writer renames its image and sidecar in one hold of it), counted as a
        skipped and removed `orphan_image`. One a sidecar names is its entry's; one whose sidecar cannot be read
        (damaged, a newer format) is skipped and left alone. Also an older Strata's plain image no sidecar names."""
        plain = GENERATION_MARK not in name   # an older Strata's `<prefix><key>.img`, which its sidecar names by default
        key = name[len(self.prefix):-4] if plain else name[len(self.prefix):].split(GENERATION_MARK, 1)[0]
        entry = self.entries.get(key)
        if entry is not None and os.path.basename(entry.image_path) == name:
            return
        with contextlib.ExitStack() as locked:
            try:
                locked.enter_context(self.io.commit_lock(self.folder))
            except CommitLockHeld:   # another server holds the folder: left for a later start (it is never read)
                return
            try:
                with open(self.sidecar_path(key), "rb") as f:
                    d = json.loads(f.read())
            except FileNotFoundError:
                d = None   # no sidecar of its key: a first save that never finished, or a deleted session's
            except (OSError, ValueError, RecursionError):
                self._skip(name, "orphan_image", "an image of one save whose key's sidecar cannot be read")
                return
            if d is not None and (not isinstance(d, dict) or d.get("format") != SIDECAR_FORMAT
                                  or d.get("version") != SIDECAR_VERSION):
                # a newer format's (a newer Strata on the folder, or before a downgrade) may name its images otherwise
                self._skip(name, "orphan_image", "an image of one save whose key's sidecar is of another format")
                return
            named = None if d is None else d.get("image", f"{self.prefix}{key}.img")
            if named == name:  # another server committed it since the index: its entry, unknown here until a restart
                return
            self._skip(name, "orphan_image", "an image of a save its sidecar does not name (a save that failed or was "
                                             "stopped, or an earlier save's image left behind)")
            try:
                self.io.remove(os.path.join(self.folder, name))
            except OSError as exc:
                self.unremovable_files[name] = exc.strerror or str(exc)
                return
        self.removed["orphan_image"] += 1
        self.removed_files[name] = "image"

    def _index_one(self, key: str, image_files: set[str]) -> None:
        name = f"{self.prefix}{key}.json"
        try:
            entry = self.read_sidecar(key)
        except _Foreign as exc:
            self._skip(name, "foreign", f"another model, KV layout or file format ({exc})")
            return
        except _Stale as exc:
            self._skip(name, "stale", f"written by an older Strata, whose engine computed the KV differently ({exc})")
            return
        except FileNotFoundError:  # removed since the listing (another server sharing the folder evicted it)
            return
        except PermissionError as exc:   # whole, as far as anyone knows: not damage, and nothing of it is removed
            self._skip(name, "unreadable", _unreadable_detail("sidecar", exc))
            return
        except (OSError, ValueError, KeyError, TypeError, ArithmeticError, RecursionError) as exc:
            # ArithmeticError: a number no int32 / int holds (a token id of 2**70, Infinity); RecursionError:
            # JSON nested ~1,000 deep. Either one escaped this and stopped the server from loading.
            self._skip(name, "damaged", f"unreadable sidecar ({type(exc).__name__}: {exc})")
            return
        if os.path.basename(entry.image_path) not in image_files:
            self._skip(name, "orphan_sidecar", "a sidecar without its image")
            return
        try:
            size = os.path.getsize(entry.image_path)
        except OSError as exc:
            self._skip(name, "orphan_sidecar", f"its image cannot be read ({exc.strerror or exc})")
            return
        if os.path.isdir(entry.image_path):   # its size is the folder's (4096), which read as a truncated image
            self._skip(name, "damaged", f"its image's name {os.path.basename(entry.image_path)} is taken by a folder "
                                        "(not Strata's: left as it is; this conversation's histories cannot be "
                                        "written to this level until it is moved away)")
            return
        if size != entry.image_bytes:  # truncated or grown: never trusted
            self._skip(name, "damaged", f"its image is {size} bytes, the sidecar says {entry.image_bytes} "
                                        "(truncated or grown)")
            return
        if not os.access(entry.image_path, os.R_OK):   # its restore would fail and delete it as damaged
            self._skip(name, "unreadable", _unreadable_detail("image", PermissionError(errno.EACCES, os.strerror(
                errno.EACCES))))
            return
        self.entries[key] = entry

    def read_sidecar(self, key: str, *, older: bool = False) -> DiskEntry:
        """Parse and check one sidecar; raises _Foreign for another model/format, _Stale for an older engine's
        KV (unless `older`: a named session an older Strata saved, whose tokens are read again), ValueError if
        damaged."""
        path = self.sidecar_path(key)
        with open(path, "rb") as f:
            raw = f.read()
        d = json.loads(raw)
        if not isinstance(d, dict) or d.get("format") != SIDECAR_FORMAT or d.get("version") != SIDECAR_VERSION:
            raise _Foreign("format")
        identity = Identity(str(d["model_id"]), str(d["kv_layout"]))
        if identity != self.identity:   # before the revision: another model's files, old or not, are theirs (an
            raise _Foreign("identity")  # older server of that model may still use them), never removed here
        revision = d.get("kv_revision", UNRECORDED_KV_REVISION)
        if not isinstance(revision, int) or isinstance(revision, bool):
            raise ValueError(f"kv_revision {revision!r} is not a number")
        if revision < KV_REVISION and not older:   # this model's, from an older engine: its KV is of no use here
            raise _Stale(f"KV revision {revision}, this engine's is {KV_REVISION}")
        if revision > KV_REVISION:   # a newer Strata's (a downgrade, or a newer one sharing the folder): theirs
            raise _Foreign(f"KV revision {revision}, newer than this engine's {KV_REVISION}")
        tokens = np.asarray(d["tokens"], dtype=np.int32)
        if d["key"] != key or tokens.ndim != 1 or int(d["n_tokens"]) != tokens.shape[0]:
            raise ValueError("sidecar key or token count does not match")
        if tokens_hash(tokens) != d["tokens_hash"]:
            raise ValueError("token hash mismatch")
        piece_bytes = int(d["piece_bytes"])
        crcs = tuple(int(c) for c in d["piece_crc32"])
        image_bytes = int(d["image_bytes"])
        if piece_bytes <= 0 or len(crcs) != -(-image_bytes // piece_bytes):
            raise ValueError("piece table does not cover the image")
        image_path = self.image_path(key)
        if "image" in d:   # a versioned image (named sessions): the sidecar names the one save it belongs to
            image = d["image"]
            if (not isinstance(image, str) or not image.startswith(f"{self.prefix}{key}{GENERATION_MARK}")
                    or not image.endswith(".img") or os.path.basename(image) != image
                    or not image[len(self.prefix) + len(key) + 1:-4].isalnum()):
                raise ValueError(f"the sidecar names an image that is not one of its own: {image!r}")
            image_path = os.path.join(self.folder, image)
        created_at, sealed_at = float(d["created_at"]), float(d["sealed_at"])
        if not all(math.isfinite(t) and abs(t) < LAST_TIME for t in (created_at, sealed_at)):
            # NaN never ages out; a time past year 9999 would be the newest for good and would hold the cache's
            # clock (steady_clock.py) there
            raise ValueError(f"its times are not finite dates (created_at {created_at}, sealed_at {sealed_at})")
        return DiskEntry(key=key, kind=str(d["kind"]), tokens=tokens, image_bytes=image_bytes,
                         sidecar_bytes=len(raw), piece_bytes=piece_bytes, piece_crc32=crcs,
                         created_at=created_at, sealed_at=sealed_at,
                         identity=identity, image_path=image_path, sidecar_path=path,
                         meta=dict(d.get("meta") or {}), sealed_by=str(d.get("sealed_by") or ""))

    # -- writes ---------------------------------------------------------------------------------

    def _write_temp(self, final: str, pieces: Iterable[bytes | memoryview],
                    sums: _PieceChecksums | None = None) -> str:
        """Write `pieces` to a fresh temporary name beside `final`, fsynced; returns that name.
        On failure nothing is left."""
        tmp = temp_name(final)
        try:
            f = self.io.open_new(tmp)
            try:
                for piece in pieces:
                    self.io.write(f, piece)
                    if sums is not None:
                        sums.feed(piece)
            finally:
                self.io.sync_close(f)
        except BaseException:
            self.io.remove(tmp)
            raise
        return tmp

    def _write_sidecar_temp(self, entry: DiskEntry) -> str:
        d = entry.sidecar_dict()
        if entry.image_path != self.image_path(entry.key):
            d["image"] = os.path.basename(entry.image_path)   # the one image this sidecar describes
        raw = json.dumps(d, separators=(",", ":")).encode()
        entry.sidecar_bytes = len(raw)
        return self._write_temp(entry.sidecar_path, [raw])

    def _commit(self, entry: DiskEntry, image_from: str, sidecar_tmp: str, undo_image,
                committing: Callable[[DiskEntry], None] | None = None) -> None:
        """Rename the image, then the sidecar, into place under the folder's commit lock: another
        writer of the same key (a second server on this folder) commits its pair wholly before or
        after, never between, so the sidecar always describes the image beside it. On failure the
        sidecar's temporary file is removed and `undo_image()` puts the image back or removes it.
        With versioned images, the image's name is new (nothing is replaced before the sidecar's rename)
        and the key's other images are removed after, in the same hold of the lock. `committing(entry)` is
        called first in that hold (what it raises commits nothing)."""
        renamed = committed = False
        try:
            with self.io.commit_lock(self.folder):
                if committing is not None:
                    committing(entry)
                self.io.rename(image_from, entry.image_path)
                renamed = True
                if self.versioned_images:
                    self._sync_folder()   # the image's rename on disk before the sidecar naming it can be
                self.io.rename(sidecar_tmp, entry.sidecar_path)
                committed = True
                if self.versioned_images:
                    self._sync_folder()   # the new sidecar's rename on disk before the earlier image's removal
                    self._remove_earlier_images(entry)
        except BaseException:
            if not committed:   # best effort: the first error is the one to tell (a read-only folder refuses these too)
                with contextlib.suppress(OSError):
                    self.io.remove(sidecar_tmp)
                with contextlib.suppress(OSError):
                    undo_image(renamed)
            raise

    def _sync_folder(self) -> None:
        """Make the renames so far durable: a file system need not keep two changes of one folder in order, so a
        power cut could keep the new sidecar's rename and lose its image's (the sidecar naming an image that is not
        there, the earlier image named by none: both swept at the next start, the session lost), or keep the earlier
        image's removal and lose the new sidecar's rename (the earlier sidecar naming a removed image). Synced after
        the image's rename and after the sidecar's. One that fails is warned of once a run of failures (a file
        system that cannot sync a folder, many FUSE ones, fails every one: two warnings a save before): the session
        is saved, its renames only not yet forced to disk."""
        try:
            self.io.sync_folder(self.folder)
        except OSError as exc:
            log.log(logging.DEBUG if self.sync_failing else logging.WARNING,
                    "conversation cache %s level: its folder %s cannot be synced (%s); a power cut may lose the last "
                    "save%s", self.name, self.folder, exc.strerror or exc,
                    "" if self.sync_failing else " (said once until a sync works again)")
            self.sync_failing = True
            return
        self.sync_failing = False

    def _remove_earlier_images(self, entry: DiskEntry) -> None:
        """After a versioned write is committed: the key's images other than the new one are no entry's (its
        sidecar names the new one). One that cannot be removed (Windows: another program holds it open; a
        read-only folder) is left for the next open to remove (_sweep_generation), with a warning."""
        keep = os.path.basename(entry.image_path)
        try:
            names = [n for n in self.images_of(entry.key) if n != keep]
        except OSError as exc:
            log.warning("conversation cache %s level: %s saved, but its folder cannot be listed to remove its "
                        "earlier image (%s); the next start removes it", self.name, entry.key, exc.strerror or exc)
            return
        for n in names:
            try:
                self.io.remove(os.path.join(self.folder, n))
            except OSError as exc:
                log.warning("conversation cache %s level: %s saved, but its earlier image %s cannot be removed (%s); "
                            "it is never read (the sidecar names the new one) and the next start removes it",
                            self.name, entry.key, n, exc.strerror or exc)

    def write(self, key: str, kind: str, tokens: np.ndarray, pieces: Iterable[bytes], now: float,
              *, created_at: float | None = None, meta: dict | None = None,
              ready: Callable[[DiskEntry], None] | None = None,
              committing: Callable[[DiskEntry], None] | None = None) -> DiskEntry:
        """Write an image from `pieces` and its sidecar atomically; does not index it (see `add`).
        `ready(entry)` is called once both are written (their sizes known), before they are renamed into place:
        what it raises leaves nothing written (a session save the stop gave up while its last write or fsync hung,
        one past the sessions folder's budget). `committing(entry)` is called after it, under the folder's commit
        lock just before the renames (no other server on the folder commits meanwhile), and what it raises leaves
        nothing written too; it must not take the commit lock itself.

        On any failure (ENOSPC, I/O error) nothing is left under the entry's names.
        """
        self.ensure_folder()
        img = self.new_image_path(key)
        sums = _PieceChecksums(self.piece_bytes)
        img_tmp = self._write_temp(img, pieces, sums)
        entry = DiskEntry(key=key, kind=kind, tokens=tokens_array(tokens), image_bytes=sums.total,
                          sidecar_bytes=0, piece_bytes=self.piece_bytes, piece_crc32=sums.finish(),
                          created_at=now if created_at is None else created_at, sealed_at=now,
                          identity=self.identity, image_path=img, sidecar_path=self.sidecar_path(key),
                          meta=dict(meta or {}), sealed_by=self.sealed_by)
        try:
            sidecar_tmp = self._write_sidecar_temp(entry)
        except BaseException:
            self.io.remove(img_tmp)
            raise
        if ready is not None:
            try:
                ready(entry)
            except BaseException:
                self.io.remove(img_tmp)
                self.io.remove(sidecar_tmp)
                raise

        def undo(renamed: bool) -> None:
            self.io.remove(img if renamed else img_tmp)

        self._commit(entry, img_tmp, sidecar_tmp, undo, committing)
        return entry

    def adopt(self, other: DiskEntry, now: float) -> DiskEntry:
        """Take another level's entry: move its image here (rename on one volume, copy across),
        write our own sidecar re-sealed at `now`. All or nothing: on failure the image is back where
        it was and nothing is left here. Does not index it and does not touch the other sidecar."""
        self.ensure_folder()
        img = self.image_path(other.key)
        entry = DiskEntry(key=other.key, kind=other.kind, tokens=other.tokens, image_bytes=other.image_bytes,
                          sidecar_bytes=0, piece_bytes=other.piece_bytes, piece_crc32=other.piece_crc32,
                          created_at=other.created_at, sealed_at=now, identity=self.identity,
                          image_path=img, sidecar_path=self.sidecar_path(other.key), meta=dict(other.meta),
                          sealed_by=self.sealed_by)
        sidecar_tmp = self._write_sidecar_temp(entry)
        try:
            staged, mode = stage_move(self.io, other.image_path, img)
        except BaseException:
            self.io.remove(sidecar_tmp)
            raise

        def undo(renamed: bool) -> None:
            if mode == "copy":
                self.io.remove(img if renamed else staged)
            elif renamed:
                self.io.rename(img, other.image_path)

        self._commit(entry, staged, sidecar_tmp, undo)
        return entry

    def reseal(self, entry: DiskEntry, sealed_at: float, adopt: Callable[[], bool] | None = None) -> bool:
        """Seal an indexed entry at `sealed_at`, in the index and in its sidecar (a fresh fsynced one renamed over it
        under the commit lock, as a write's): a start that finds only files a wrong clock sealed far ahead would
        trust them all and move the cache's clock there. The sidecar is rewritten only while it is still the one
        indexed (same seal, same image): one another server wrote since is left alone. Raises OSError (a read-only
        folder, the commit lock held by another server): the index is resealed all the same. The caller reseals
        files this clock sealed (ConversationCache._reseal_far_ahead); `adopt`, for a file another clock sealed (or
        one that names none), is asked under the commit lock whether its seal may be taken over (no live server of
        that clock on the folder: clock_presence): then the sidecar names this clock, else it is left. Returns
        whether the sidecar was rewritten."""
        was = entry.sealed_at
        entry.sealed_at = sealed_at
        with self.io.commit_lock(self.folder):
            try:
                with open(entry.sidecar_path, "rb") as f:
                    d = json.loads(f.read())
            except FileNotFoundError:   # removed since the index (another server evicted it)
                return False
            if (not isinstance(d, dict) or d.get("sealed_at") != was
                    or d.get("image", os.path.basename(self.image_path(entry.key)))
                    != os.path.basename(entry.image_path)):
                return False
            if adopt is not None and not adopt():
                return False
            by = entry.sealed_by
            entry.sealed_by = self.sealed_by if adopt is not None else by
            try:
                tmp = self._write_sidecar_temp(entry)
                try:
                    self.io.rename(tmp, entry.sidecar_path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        self.io.remove(tmp)
                    raise
            except BaseException:
                entry.sealed_by = by
                raise
        return True

    def add(self, entry: DiskEntry) -> None:
        self.entries[entry.key] = entry

    def forget(self, key: str, *, if_names: str | None = None) -> DiskEntry | None:
        """Unindex and remove the files of `key` (sidecar first: without it the image is no entry).
        Raises OSError when the sidecar cannot be removed (the folder went read-only); the entry then stays
        indexed, since its files are still an entry (the next start finds it). An image that cannot be removed
        once the sidecar is gone (Windows: another process maps it, restoring it from a folder it shares) is
        warned of, not raised: the entry is gone (no sidecar names the image) and the next open removes it.
        `if_names` (an image path): the files are removed only while no sidecar of `key` stands, or the one there
        names that image, read under the commit lock; else `key` is only unindexed (the sidecar is another save's:
        another server's on this folder, another model's, an older Strata's, one that cannot be read)."""
        with self.io.commit_lock(self.folder):  # not between another writer's image and its sidecar
            entry = self.entries.pop(key, None)   # still indexed when the lock is not had (CommitLockHeld raised)
            try:
                self._remove_files(key, if_names)
            except OSError:
                if entry is not None:
                    self.entries[key] = entry
                raise
        return entry

    def _remove_files(self, key: str, if_names: str | None) -> None:
        """forget's removal (the caller holds the commit lock): nothing when `if_names` says the sidecar is another
        save's; OSError when the sidecar cannot be removed; an image that cannot be is warned of."""
        if if_names is not None and not self._sidecar_names(key, if_names):
            return
        self.io.remove(self.sidecar_path(key))
        if not self.versioned_images:
            try:
                self.io.remove(self.image_path(key))
            except OSError as exc:   # raised, the eviction went uncounted and was said to keep the files
                self.remove_failures += 1
                log.warning("conversation cache %s level: %s removed, but its image cannot be removed (%s); it is "
                            "no entry (its sidecar is gone) and the next start removes it", self.name, key,
                            exc.strerror or exc)
            return
        try:
            names = self.images_of(key)   # each save's image (one, unless an earlier one could not be removed)
            for n in names:
                self.io.remove(os.path.join(self.folder, n))
        except OSError as exc:   # deleted all the same: no sidecar names the image, never read again
            log.warning("conversation cache %s level: %s deleted, but an image of it cannot be removed (%s); it is "
                        "never read (no sidecar names it) and the next start removes it", self.name, key,
                        exc.strerror or exc)

    def _sidecar_names(self, key: str, image_path: str) -> bool:
        """Whether the sidecar of `key` is gone or names `image_path` (the caller holds the commit lock)."""
        try:
            with open(self.sidecar_path(key), "rb") as f:
                named = json.loads(f.read()).get("image", f"{self.prefix}{key}.img")
        except FileNotFoundError:
            return True
        except (OSError, ValueError, AttributeError, RecursionError):   # cannot be read: not known to be this one's
            return False
        return named == os.path.basename(image_path)

    # -- reads ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def mapped(self, entry: DiskEntry) -> Iterator[memoryview]:
        """The whole image as one read-only memoryview of a memory map (empty for an empty file)."""
        with open(entry.image_path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                yield memoryview(b"")
                return
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            if hasattr(mm, "madvise") and hasattr(mmap, "MADV_SEQUENTIAL"):
                mm.madvise(mmap.MADV_SEQUENTIAL)
            view = memoryview(mm)
            try:
                yield view
            finally:
                try:
                    view.release()
                except BufferError:  # a consumer still holds a slice; it goes with the map
                    pass
        finally:
            try:
                mm.close()
            except BufferError:  # a consumer still holds a view: the map closes when it is collected
                pass

    def mapped_pieces(self, entry: DiskEntry, sizes: list[int] | None = None) -> Iterator[memoryview]:
        """The image as read-only views of one memory map (no copy into the process): pieces of the
        given sizes, or of `entry.piece_bytes`. The views are valid while the generator runs."""
        with self.mapped(entry) as view:
            size = len(view)
            if size == 0:
                return
            if sizes is None:
                sizes = [entry.piece_bytes] * -(-size // entry.piece_bytes)
            pos = 0
            for n in sizes:
                if pos >= size:
                    return
                yield view[pos:pos + n]
                pos += n

    def read_ranges(self, entry: DiskEntry, sizes: list[int]) -> Iterator[bytes]:
        """The image cut into consecutive pieces of the given sizes (the last may come short)."""
        with open(entry.image_path, "rb", buffering=0) as f:
            for size in sizes:
                piece = f.read(size)
                if not piece:
                    return
                yield piece

    def read_pieces(self, entry: DiskEntry, piece_bytes: int | None = None) -> Iterator[bytes]:
        """The image in pieces of `entry.piece_bytes` (the checksum pieces)."""
        size = piece_bytes or entry.piece_bytes
        with open(entry.image_path, "rb", buffering=0) as f:
            while True:
                piece = f.read(size)
                if not piece:
                    return
                yield piece


class _Foreign(Exception):
    """A sidecar of another model, layout or format: skipped, left alone."""


class _Stale(Exception):
    """A sidecar an older Strata wrote, its KV computed by an older engine: skipped, its image never restored. A
    cache level's are removed at open (damaged_files.py: no engine of this version can use them); a named
    session's are kept, and rebuilt from their tokens when restored (sessions.py)."""
