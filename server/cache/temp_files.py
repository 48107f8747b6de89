"""Temporary file names of the cache's writes, and which leftovers are safe to remove.

What this is: every write goes to `<final name>.<host>-<pid>-<random>.tmp` beside its final name,
so two writers of one key (two servers sharing a folder, two threads) never share a temporary file;
the name says which process wrote it, so at start-up a leftover can be told from a live writer's.
What this is not: the writes themselves (disk.py, fileio.py) or the index.
"""

from __future__ import annotations

import os
import re
import secrets
import socket

import psutil

TEMP_SUFFIX = ".tmp"
# A live writer adds to its temporary file with every piece (an image is written in seconds); one an
# hour old whose writer cannot be checked (another host, an older name, a pid since reused) is left over.
ABANDONED_AFTER_S = 3600.0
HOST = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"


def temp_name(path: str) -> str:
    """A fresh temporary name beside `path`, unique to this process and this call."""
    return f"{path}.{HOST}-{os.getpid()}-{secrets.token_hex(6)}{TEMP_SUFFIX}"


def writer_of(name: str) -> tuple[str, int] | None:
    """(host, pid) of the process that made temporary file `name`, or None for a name it cannot tell."""
    if not name.endswith(TEMP_SUFFIX):
        return None
    tag = name[:-len(TEMP_SUFFIX)].rsplit(".", 1)[-1]
    parts = tag.split("-")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1])


def abandoned(name: str, age_s: float) -> tuple[bool, str]:
    """Whether temporary file `name`, last written `age_s` seconds ago, is a leftover to remove, and why.

    Removed: one whose writer on this host is no longer running, or any one older than
    ABANDONED_AFTER_S. Kept: one a running process on this host (or a process on another host sharing
    the folder, or one of a name without a writer) may still be writing."""
    writer = writer_of(name)
    if writer is not None and writer[0] == HOST and not psutil.pid_exists(writer[1]):
        return True, f"its writer (pid {writer[1]}) is not running"
    if age_s > ABANDONED_AFTER_S:
        return True, f"not written for {age_s / 60:.0f} minutes"
    if writer is None:
        return False, "a temporary file of unknown writer, written in the last hour"
    who = f"pid {writer[1]}" if writer[0] == HOST else f"pid {writer[1]} on host {writer[0]}"
    return False, f"{who} may still be writing it"
