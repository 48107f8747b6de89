"""The one seam for the machine's available RAM, which admission compares against the floors.

What this is: `MemoryProbe`, psutil's `virtual_memory().available` in MiB by default (read from
/proc/meminfo directly where psutil takes MemAvailable as it is), or any
callable a test injects (so admission and `park=auto` are tested both ways without mocking the
cache). What this is not: a budget; the RAM level's budget is `--conversation-cache-mib`.
"""

from __future__ import annotations

from collections.abc import Callable

import psutil

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
    def __init__(self, available_mib: Callable[[], float] | None = None) -> None:
        self._available = available_mib or _available_mib

    def available_mib(self) -> float:
        return float(self._available())


class FixedMemory(MemoryProbe):
    """A probe reporting a settable figure (tests, benchmarks)."""

    def __init__(self, available_mib: float) -> None:
        self.value = float(available_mib)
        super().__init__(lambda: self.value)
