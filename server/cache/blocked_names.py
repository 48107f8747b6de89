"""Names of a disk level's files that a folder stands on: that one conversation's writes there fail, no other's.

What this is: the record, per level, of the conversations whose image or sidecar name in that level's folder is
taken by a folder (made by hand, by a sync tool), kept by the cascade: such a write is tried no more (nothing is
evicted to make room for it), counted as a failed write each time, said once a name (a WARNING naming the path),
and a level above passes that entry by when it makes room (policy.plan_demotions, `stuck`): it stays where it is.
Once the folder is gone (looked at each time the level above plans) it is written there again, said at INFO.
What this is not: a level failing as a whole (a read-only or full folder: cascade.write_failed's failing state,
which a level's next good write ends); the cache never removes such a folder, which is not its own.
"""

from __future__ import annotations

import errno
import logging
import os

log = logging.getLogger("strata.cache")


def folder_in_place(lvl, key: str) -> str | None:
    """The path of `key`'s image or sidecar in `lvl` where a folder stands there, else None. Looked at rather than
    read from the error: Windows says a rename onto a folder is `Access is denied` (5), as for a file held open."""
    for path in (lvl.image_path(key), lvl.sidecar_path(key)):
        if os.path.isdir(path):
            return path
    return None


class NameTaken(IsADirectoryError):
    """`check`'s refusal: the folder it found stands on the name (recorded; said once)."""


class BlockedNames:
    def __init__(self) -> None:
        self._paths: dict[str, dict[str, str]] = {}   # level name -> key -> the folder standing on a name of it

    def check(self, lvl, key: str) -> None:
        """Raise IsADirectoryError naming the folder when one stands on `key`'s names in `lvl` (before any room is
        made for the write: evicting for a write that cannot be done lost histories), recording it (said once)."""
        path = folder_in_place(lvl, key)
        if path is None:
            return
        self.record(lvl, key, path)
        raise NameTaken(errno.EISDIR, os.strerror(errno.EISDIR), path)

    def record(self, lvl, key: str, path: str) -> None:
        paths = self._paths.setdefault(lvl.name, {})
        if key in paths:
            return
        paths[key] = path
        log.warning("conversation cache %s level: cannot write to %s: a folder stands there (not Strata's: left as "
                    "it is); conversation %s is not written there until that folder is moved away (each try skipped and "
                    "counted: it stays in RAM or on the level above, or goes to another level that takes it, else it "
                    "is let go); other conversations are written as before", lvl.name, path, key)

    def blocked(self, lvl, key: str, exc: OSError) -> bool:
        """Whether a failed write of `key` to `lvl` was a folder on its name (recorded here; said once). `check`'s own
        refusal is, however the folder is now: looked at again, one moved away just after its look took the level
        as failing."""
        if isinstance(exc, NameTaken):
            return True
        path = folder_in_place(lvl, key)
        if path is not None:
            self.record(lvl, key, path)
        return path is not None

    def stuck(self, lvl) -> frozenset[str]:
        """The keys whose names in `lvl` a folder still stands on; the ones whose folder is gone are let go."""
        paths = self._paths.get(lvl.name)
        if not paths:
            return frozenset()
        for key, path in list(paths.items()):
            if not os.path.isdir(path):
                del paths[key]
                log.info("conversation cache %s level: %s is no longer a folder; conversation %s is written there "
                         "again", lvl.name, path, key)
        return frozenset(paths)

    def holds(self, lvl, key: str) -> bool:
        """Whether `key` was found stuck on `lvl` (no look at the folder: `stuck` looks)."""
        return key in self._paths.get(lvl.name, {})
