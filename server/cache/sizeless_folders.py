"""Start-up check: no cache folder on a file system that reports no size (statvfs 0 blocks: /proc, /sys, cgroup
and other pseudo file systems). Such a folder holds no files of its own (under /proc a mkdir fails, under
/sys/fs/cgroup, as root, it makes a cgroup), and its free space reads 0 bytes: a level there ran with a budget no
write could meet. `strata setup` refuses such folders (5f43ab8); a flag set by hand is refused here, before the
model loads, naming the flag and the folder. What this is not: the checks of a folder that exists on a disk (the
level's own open and folder_checks.py)."""

from __future__ import annotations

import os
import shutil

from .options import CacheConfig, CacheConfigError


def nearest_existing(folder: str) -> str:
    """`folder`, or the nearest folder above it that exists (where it would be made)."""
    path = os.path.abspath(os.path.expanduser(folder))
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def reports_no_size(folder: str) -> bool:
    """Whether the file system `folder` is (or would be made) on reports a total size of 0. False where that cannot
    be read (a folder out of reach is the level's own open to report)."""
    try:
        return shutil.disk_usage(nearest_existing(folder)).total == 0
    except OSError:
        return False


def folders_in_use(config: CacheConfig) -> list[tuple[str, str]]:
    """(flag, folder) of each store that is on, and the sessions folder (the session API always has one)."""
    named = config.store_folders() + [("--conversation-cache-sessions-dir", config.sessions_dir, 1)]
    return [(flag, folder) for flag, folder, mib in named if folder and mib > 0]


def check_sizeless_folders(config: CacheConfig) -> None:
    """Raises CacheConfigError naming the first flag whose folder is on a file system that reports no size."""
    for flag, folder in folders_in_use(config):
        if reports_no_size(folder):
            raise CacheConfigError(
                f"{flag} {folder}: on a file system that reports no size (as /proc and /sys do: they hold no "
                "files of their own), so nothing can be kept there; choose a folder on a disk")
