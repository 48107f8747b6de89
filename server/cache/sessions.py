"""Named sessions: a context's state saved to / restored from a file by a name the client picks.

What this is: name validation (no path tricks: letters, digits, `.`, `_`, `-`, not starting with
a dot, at most 100 characters) and the sessions folder as a DiskLevel of files
`strata-session-<name>.img` + `.json`, opened on first use. What this is not: placement or restore
(cache.py runs both through the same placement function and streamed restore as every disk read).
"""

from __future__ import annotations

import re

from .disk import DiskLevel, Identity
from .fileio import FileIO

SESSION_PREFIX = "strata-session-"
_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$")


class SessionNameError(ValueError):
    pass


def validate_session_name(name: object) -> str:
    """Return the name if it is safe as part of a file name; raise SessionNameError naming it."""
    if not isinstance(name, str) or not _NAME.match(name) or ".." in name or name.endswith((".tmp", ".")):
        raise SessionNameError(
            f"invalid session name {name!r}: use 1-100 letters, digits, '.', '_' or '-', "
            "not starting with '.', no '..'")
    return name


class SessionStore:
    def __init__(self, folder: str, identity: Identity, *, io: FileIO | None = None,
                 piece_bytes: int | None = None) -> None:
        kwargs = {"piece_bytes": piece_bytes} if piece_bytes else {}
        self.level = DiskLevel("sessions", folder, 0, 0.0, identity, io=io, prefix=SESSION_PREFIX, **kwargs)
        self._opened = False

    def ensure_open(self) -> DiskLevel:
        if not self._opened:
            self.level.open()
            self._opened = True
        return self.level

    def list(self) -> list[dict]:
        lvl = self.ensure_open()
        return [{"name": e.key, "n_tokens": e.n_tokens, "bytes": e.image_bytes, "created_at": e.created_at}
                for e in sorted(lvl.entries.values(), key=lambda e: e.key)]
