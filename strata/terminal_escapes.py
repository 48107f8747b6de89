"""Whether a terminal shows ANSI escape sequences (`\\r\\x1b[2K`: erase the line), turning them on where they must be.

Linux and macOS terminals show them. A Windows console does only in its virtual-terminal mode, which a program
turns on for itself (ENABLE_VIRTUAL_TERMINAL_PROCESSING, Windows 10 1511 and later; Windows Terminal has it on):
without it `strata serve --status-line` printed '←[2K' before every status and log line. Where the mode cannot be
turned on (an older console), the caller leaves the escapes out. The Windows call has not been run here (no
Windows machine); its decision is tested with the platform set.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

ENABLE_VIRTUAL_TERMINAL_PROCESSING = 0x0004   # wincon.h


def escapes_shown(fd: int, platform: str | None = None,
                  turn_on: Callable[[int], bool] | None = None) -> bool:
    """Whether the terminal on `fd` shows escape sequences once this returns (on Windows: its virtual-terminal
    mode turned on by `turn_on`, by default through the console API)."""
    if (sys.platform if platform is None else platform) != "win32":
        return True
    try:
        return bool((turn_on or virtual_terminal_on)(fd))
    except (OSError, ValueError, AttributeError):   # not a console handle, or no console API
        return False


def virtual_terminal_on(fd: int) -> bool:
    """Windows: the console on `fd` in virtual-terminal mode (already, or now); False where it cannot be."""
    import ctypes
    import msvcrt
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    handle = wintypes.HANDLE(msvcrt.get_osfhandle(fd))
    mode = wintypes.DWORD()
    if not kernel32.GetConsoleMode(handle, ctypes.byref(mode)):
        return False
    if mode.value & ENABLE_VIRTUAL_TERMINAL_PROCESSING:
        return True
    return bool(kernel32.SetConsoleMode(handle, mode.value | ENABLE_VIRTUAL_TERMINAL_PROCESSING))
