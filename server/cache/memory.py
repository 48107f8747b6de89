"""The one seam for the machine's available RAM, which admission compares against the floors.

What this is: `MemoryProbe`, psutil's `virtual_memory().available` in MiB by default (read from
/proc/meminfo directly where psutil takes MemAvailable as it is), lowered to what this process's cgroup
memory limit still leaves (cgroup_memory.py: in a container the host's figure counts RAM it cannot have), or any
callable a test injects (so admission and `park=auto` are tested both ways without mocking the
cache). What this is not: a budget; the RAM level's budget is `--conversation-cache-mib`.
"""

from __future__ import annotations

from collections.abc import Callable

import psutil

from .cgroup_memory import CgroupMemory

MIB = 1024 * 1024


MEMINFO = "/proc/meminfo"


def _psutil_available_mib() -> float:
    return psutil.virtual_memory().available / MIB


def available_from_meminfo(text: bytes) -> int | None:
    """MemAvailable in bytes from /proc/meminfo's text when psutil takes it as it is (present, above 0, at
    most MemTotal); None when psutil would work it out otherwise (an old kernel, a container's odd figures)."""
    fields = {}
    for name in (b"MemTotal:", b"MemAvailable:"):
        at = text.find(name)
        if at < 0:
            return None
        fields[name] = int(text[at + len(name): text.index(b"\n", at)].split()[0]) * 1024
    avail = fields[b"MemAvailable:"]
    return avail if 0 < avail <= fields[b"MemTotal:"] else None


def _available_mib() -> float:
    """psutil's `available`, read from /proc/meminfo's two lines where psutil takes them as they are: psutil
    parses every line of it (~30 us; a park reads it once, on the worker thread, for each request that
    displaces a history), this ~10 us."""
    try:
        with open(MEMINFO, "rb") as f:
            avail = available_from_meminfo(f.read())
    except (OSError, ValueError, IndexError):
        avail = None
    return avail / MIB if avail is not None else _psutil_available_mib()


class MemoryProbe:
    """`available_mib()`: the least of the host's available RAM and the cgroup limit's headroom. `limit_mib()`:
    the cgroup limit that applies (None without one, and for an injected figure)."""

    def __init__(self, available_mib: Callable[[], float] | None = None, cgroup: CgroupMemory | None = None) -> None:
        self._cgroup = cgroup if cgroup is not None else (CgroupMemory() if available_mib is None else None)
        self._available = available_mib or _available_mib

    def available_mib(self) -> float:
        host = float(self._available())
        room = self._cgroup.available_bytes() if self._cgroup is not None else None
        return host if room is None else min(host, room / MIB)

    def limit_mib(self) -> float | None:
        limit = self._cgroup.limit_bytes() if self._cgroup is not None else None
        return None if limit is None else limit / MIB

    def limit_note(self) -> str | None:
        """The start-up line's words for the limit that applies, None without one."""
        g = self._cgroup.tightest() if self._cgroup is not None else None
        if g is None:
            return None
        return (f"memory limit {g.limit_bytes / MIB:.0f} MiB applies (cgroup v{g.version} {g.folder}): "
                f"admission reads what it leaves")


class FixedMemory(MemoryProbe):
    """A probe reporting a settable figure (tests, benchmarks)."""

    def __init__(self, available_mib: float) -> None:
        self.value = float(available_mib)
        super().__init__(lambda: self.value)
