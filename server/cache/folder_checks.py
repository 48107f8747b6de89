"""What the conversation cache says about a disk folder when it opens it: the files it skipped and why,
and the settings that will lose histories later (a folder it cannot write, files over the budget, a
budget the volume cannot hold). Log lines only: nothing here changes the index or the files."""

from __future__ import annotations

import logging
import os
import shutil

from .damaged_files import REMOVABLE_REASONS
from .disk import DiskLevel
from .memory import MIB

log = logging.getLogger("strata.cache")

MAX_SKIPPED_LOGGED = 10  # per level at open: a folder of old files must not flood the log


def log_skipped_files(lvl: DiskLevel) -> None:
    """Say which files an index skipped and why (they are counted either way): a warning per damaged,
    partial or orphaned file, saying whether it was removed (damaged_files.py), one INFO line for another
    model's files (a shared folder is normal)."""
    for name, why in lvl.swept[:MAX_SKIPPED_LOGGED]:
        log.info("conversation cache %s level: removed %s, a temporary file left by a write that did not "
                 "finish (%s)", lvl.name, os.path.join(lvl.folder, name), why)
    foreign = [name for name, reason, _ in lvl.skipped_files if reason == "foreign"]
    if foreign:
        log.info("conversation cache %s level %s: %d file(s) of another model or KV layout left alone (%s MiB, "
                 "outside this level's budget; another model's server may share the folder, so they are not "
                 "removed: delete them by hand if none does)", lvl.name, lvl.folder, len(foreign),
                 _mib_shown(sum(_pair_bytes(lvl, name) for name in foreign)))
    log_stale(lvl)
    bad = [s for s in lvl.skipped_files if s[1] not in ("foreign", "stale")]
    for name, reason, detail in bad[:MAX_SKIPPED_LOGGED]:
        removed, refused = lvl.removed_files.get(name), lvl.unremovable_files.get(name)
        if removed:
            fate = f"removed ({removed}: files Strata wrote, damaged or orphaned)"
            if refused:
                fate += f"; the rest could not be removed ({refused}) and is left on disk"
        elif refused:
            fate = f"left on disk (files Strata wrote, but they could not be removed ({refused}))"
        elif name in lvl.changed_files:
            fate = "left alone (it changed since it was read (another server on this folder): removed or whole again)"
        elif reason in REMOVABLE_REASONS:
            fate = "left on disk (not recognisably a file Strata wrote)"
        else:
            fate = "left on disk"
        log.warning("conversation cache %s level: skipped %s (%s: %s); not trusted, %s",
                    lvl.name, os.path.join(lvl.folder, name), reason, detail, fate)
    if len(bad) > MAX_SKIPPED_LOGGED:
        log.warning("conversation cache %s level: %d more files skipped, %d of them removed "
                    "(strata_cache_skipped_files_total and strata_cache_removed_files_total have them by reason)",
                    lvl.name, len(bad) - MAX_SKIPPED_LOGGED,
                    sum(1 for name, _, _ in bad[MAX_SKIPPED_LOGGED:] if name in lvl.removed_files))


def _pair_bytes(lvl: DiskLevel, sidecar_name: str) -> int:
    """Bytes of a skipped sidecar and the image of its name (0 for what is gone)."""
    key = sidecar_name[len(lvl.prefix):].rsplit(".", 1)[0]
    total = 0
    for path in (lvl.sidecar_path(key), lvl.image_path(key)):
        try:
            total += os.path.getsize(path)
        except OSError:
            pass
    return total


def _mib_shown(n_bytes: int) -> str:
    return f"{n_bytes / MIB:.1f}" if n_bytes < 10 * MIB else str(n_bytes // MIB)


def log_stale(lvl: DiskLevel) -> None:
    """One line for the files an older Strata wrote (after an upgrade there may be thousands): why the
    conversations they held are not restored, and what became of the files."""
    stale = [name for name, reason, _ in lvl.skipped_files if reason == "stale"]
    if not stale:
        return
    removed = sum(1 for name in stale if name in lvl.removed_files)
    fate = "removed" if removed == len(stale) else f"{removed} removed, {len(stale) - removed} left on disk"
    what = "entry" if len(stale) == 1 else "entries"   # conversations, segments or system prompts
    log.warning("conversation cache %s level %s: %d %s kept by an older Strata are not restored: their KV was "
                "computed by an older engine than this version's; %s (the next turn of each conversation reads "
                "its history again)", lvl.name, lvl.folder, len(stale), what, fate)


def warn_budget_beyond_free_space(lvl: DiskLevel) -> None:
    """A folder this process cannot write (its entries are still read), files over the budget (a budget
    lowered since), or a budget the volume cannot hold: the volume, not the budget, then decides how much is kept
    (its oldest entries make room when it fills: cascade.room_on_volume), and other programs find it full."""
    if lvl.state != "on" or not lvl.budget_bytes:
        return
    if not os.access(lvl.folder, os.W_OK):
        log.warning("conversation cache %s level %s: the folder is not writable (read-only or its permissions): "
                    "its %d entries are read, nothing new is kept there; give --conversation-cache-%s-dir a "
                    "folder this user can write", lvl.name, lvl.folder, len(lvl.entries), lvl.name)
        return
    if lvl.used_bytes > lvl.budget_bytes:  # a budget lowered since the files were written
        log.warning("conversation cache %s level %s: holds %d MiB in %d entries, over its budget of %d MiB: the "
                    "oldest leave it at the next write until it fits (handed down, or deleted from the last "
                    "level); raise --conversation-cache-%s-mib to keep them", lvl.name, lvl.folder,
                    lvl.used_bytes // MIB, len(lvl.entries), lvl.budget_bytes // MIB, lvl.name)
    try:
        room = shutil.disk_usage(lvl.folder).free + lvl.used_bytes
    except OSError:
        return
    if lvl.budget_bytes > room:
        log.warning("conversation cache %s level %s: budget %d MiB but its volume has room for %d MiB (free "
                    "space plus the level's files): when the volume fills, the level's oldest entries make room "
                    "before its budget is reached, and other programs find the disk full; lower "
                    "--conversation-cache-%s-mib to at most %d or free space there",
                    lvl.name, lvl.folder, lvl.budget_bytes // MIB, room // MIB, lvl.name, room // MIB)
