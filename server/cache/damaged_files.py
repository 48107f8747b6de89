"""Damaged files a disk level skipped at open: which of them Strata wrote, and removing those.

What this is: a skipped file is never trusted, and one left on disk sits outside the level's budget for
good (a user's disk filled with junk Strata itself wrote). So at open, after the index, the damaged
entries (a sidecar that does not parse or an image of the wrong size), the stale ones (an older Strata's,
its KV computed by an older engine: no use to this version), sidecars without their image and images without
their sidecar are removed, each counted and named once in the log
(folder_checks.log_skipped_files), when the files themselves show Strata wrote them: a sidecar that
begins as every sidecar Strata writes does (`{"format": "strata-conv-sidecar"`), an image that begins
with the engine's snapshot magic. A sidecar Strata wrote vouches for the image of its own name. Kept:
another model's files (`foreign`: valid, a shared folder), temporary files a writer may still be
writing (`partial`), and anything these checks cannot tell is Strata's (a zero-byte file, a sidecar cut
before its format field), which stays skipped and logged. Each removal happens under the folder's commit
lock, after checking the file is still what was skipped (another server sharing the folder may have
committed a pair since). What this is not: the index (disk.py) or damage found at restore time
(restoring.py discards those entries).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

from .fileio import CommitLockHeld

REMOVABLE_REASONS = ("damaged", "stale", "orphan_sidecar", "orphan_image")
_SIDECAR_START = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"strata-conv-sidecar"')
_PROBE_BYTES = 64


@dataclass(frozen=True)
class Removal:
    sidecar: bool
    image: bool


def removal_for(reason: str, sidecar_ours: bool, image_ours: bool) -> Removal:
    """Which files of a skipped entry to remove (pure): only Strata's own, only for damage and orphans."""
    if reason not in REMOVABLE_REASONS:
        return Removal(False, False)
    if reason == "orphan_image":
        return Removal(False, image_ours)
    return Removal(sidecar_ours, sidecar_ours or image_ours)


def _starts_with(path: str, check) -> bool:
    """Whether `path` is a regular file whose first bytes pass `check` (False when it cannot be read)."""
    try:
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as f:
            return bool(check(f.read(_PROBE_BYTES)))
    except OSError:
        return False


def sidecar_is_ours(path: str) -> bool:
    return _starts_with(path, _SIDECAR_START.match)


def image_is_ours(path: str, magic: bytes | None) -> bool:
    return bool(magic) and _starts_with(path, lambda head: head.startswith(magic))


def remove_skipped(lvl) -> None:
    """Remove the files of `lvl`'s skipped entries that Strata wrote (see the module's docstring), count
    them in `lvl.removed` by reason and name them in `lvl.removed_files`."""
    for name, reason, _ in lvl.skipped_files:
        if reason not in REMOVABLE_REASONS:
            continue
        key = name[len(lvl.prefix):].rsplit(".", 1)[0]
        sidecar, image = lvl.sidecar_path(key), lvl.image_path(key)
        with contextlib.ExitStack() as locked:
            try:   # not between another writer's image and its sidecar
                locked.enter_context(lvl.io.commit_lock(lvl.folder))
            except CommitLockHeld as exc:   # another server holds the folder: left, and said so (folder_checks)
                lvl.remove_failures += 1
                lvl.unremovable_files[name] = str(exc.strerror)
                continue
            if not _still_skipped(lvl, key, reason):
                lvl.changed_files.add(name)
                continue
            plan = removal_for(reason, sidecar_is_ours(sidecar), image_is_ours(image, lvl.image_magic))
            gone = []
            try:
                if plan.sidecar:
                    lvl.io.remove(sidecar)
                    gone.append("sidecar")
                if plan.image and os.path.isfile(image):
                    lvl.io.remove(image)
                    gone.append("image")
            except OSError as exc:   # a read-only folder: what is left stays skipped, and is not counted removed
                lvl.remove_failures += 1
                lvl.unremovable_files[name] = str(exc.strerror or exc)
        if gone:
            lvl.removed[reason] += 1
            lvl.removed_files[name] = " and ".join(gone)


def _still_skipped(lvl, key: str, reason: str) -> bool:
    """Whether the files of `key` are still the skipped kind: a pair committed since by another server
    on this folder is an entry now, and is left alone (the next start indexes it)."""
    has_sidecar = os.path.exists(lvl.sidecar_path(key))
    has_image = os.path.exists(lvl.image_path(key))
    if reason == "orphan_image":
        return has_image and not has_sidecar
    if reason == "orphan_sidecar":
        return has_sidecar and not has_image
    from .disk import _Foreign

    try:
        entry = lvl.read_sidecar(key)
    except (FileNotFoundError, _Foreign):   # gone, or now another model's: never removed
        return False
    except Exception:   # still unreadable
        return True
    return not os.path.isfile(entry.image_path) or os.path.getsize(entry.image_path) != entry.image_bytes
