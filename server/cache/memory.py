"""The one seam for the machine's available RAM, which admission compares against the floors.

What this is: `MemoryProbe`, psutil's `virtual_memory().available` in MiB by default, or any
callable a test injects (so admission and `park=auto` are tested both ways without mocking the
cache). What this is not: a budget; the RAM level's budget is `--conversation-cache-mib`.
"""

from __future__ import annotations

from collections.abc import Callable

import psutil

MIB = 1024 * 1024


def _psutil_available_mib() -> float:
    return psutil.virtual_memory().available / MIB


class MemoryProbe:
    def __init__(self, available_mib: Callable[[], float] | None = None) -> None:
        self._available = available_mib or _psutil_available_mib

    def available_mib(self) -> float:
        return float(self._available())


class FixedMemory(MemoryProbe):
    """A probe reporting a settable figure (tests, benchmarks)."""

    def __init__(self, available_mib: float) -> None:
        self.value = float(available_mib)
        super().__init__(lambda: self.value)
