"""A closed console window, a log-off or a shutdown on Windows held until `strata serve`'s stop has ended.

Windows tells a console process of these by calling its console handlers on a thread it creates, and ends the
process as soon as a handler returns TRUE, or 5 s after the event when none has returned (the close, log-off and
shutdown timeouts of a console process). The C runtime's handler reports a close as SIGBREAK and returns at once,
so the stop the signal starts was killed before it had parked anything. `ConsoleCloseHold` is our handler's
decision and wait, plain Python a Linux test drives from a thread of its own: for a close, log-off or shutdown it
hands the stop to the loop and waits until the stop has ended or CLOSE_HOLD_S has passed, then answers True
(handled: Windows then ends the process); Ctrl-C and Ctrl-Break it leaves to the signal handlers (False: the next
handler, the C runtime's, raises SIGINT / SIGBREAK). `register` is the Windows-only part: SetConsoleCtrlHandler
through ctypes.

Windows calls console handlers for a log-off or shutdown only in a process that has not loaded user32.dll or
gdi32.dll (such a process gets window messages for them instead); `strata serve` imports no GUI toolkit, but
whether a dependency loads user32.dll there is not verified, nor is the ctypes registration (no Windows here); the
decision and the wait are tested.

Not here: what the stop does (server/cli.serve, server/app.py); the signals (server/cli.on_stop_signals).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("strata.server")

# wincon.h's control events
CTRL_C_EVENT = 0
CTRL_BREAK_EVENT = 1
CTRL_CLOSE_EVENT = 2
CTRL_LOGOFF_EVENT = 5
CTRL_SHUTDOWN_EVENT = 6
HELD_EVENTS = frozenset({CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT})
EVENT_NAMES = {CTRL_CLOSE_EVENT: "the console window was closed", CTRL_LOGOFF_EVENT: "the user is logging off",
               CTRL_SHUTDOWN_EVENT: "the system is shutting down"}

# Windows ends a console process 5 s after a close (log-off, shutdown) event whose handler has not returned
# (SetConsoleCtrlHandler's documentation). Returning at 4.5 s leaves the log's last lines the half second to be
# written; past it the process is ended mid-stop whatever we do.
CLOSE_HOLD_S = 4.5


class ConsoleCloseHold:
    """A console control handler's decision and wait. `start_stop()` begins the server's stop (it must return at
    once: it hands the stop to the loop); `stopped()` is called when the stop has ended. Called for an event,
    on whatever thread Windows made for it, it answers whether the event was handled."""

    def __init__(self, start_stop: Callable[[], None], hold_s: float = CLOSE_HOLD_S) -> None:
        if not hold_s > 0:
            raise ValueError(f"hold_s must be a number of seconds > 0, got {hold_s!r}")
        self.start_stop, self.hold_s = start_stop, hold_s
        self._stopped = threading.Event()

    def stopped(self) -> None:
        """The stop has ended: a handler waiting returns now (and one called later at once)."""
        self._stopped.set()

    def __call__(self, event: int) -> bool:
        if event not in HELD_EVENTS:
            return False                # Ctrl-C, Ctrl-Break: the C runtime's handler raises their signals
        if not self._stopped.is_set():
            log.info("stopping: %s; Windows ends this process within 5 s", EVENT_NAMES[event])
            try:
                self.start_stop()
            except RuntimeError:        # the loop has closed: the stop is over
                return True
            if not self._stopped.wait(self.hold_s):
                log.warning("stopping: the stop has not ended after %.1f s; Windows ends the process now (what is "
                            "not yet written to disk is lost)", self.hold_s)
        return True


# the registered callbacks, kept for the life of the process: Windows' thread may still be returning through one
# after it was unregistered, and a freed ctypes thunk would crash it
_KEPT: list[object] = []


def register(handler: Callable[[int], bool]) -> Callable[[], None]:
    """Puts `handler` first among the process's console control handlers (Windows only; elsewhere nothing);
    returns what unregisters it. A process without a console (the app's server) registers too: it gets no events."""
    if sys.platform != "win32":
        return lambda: None
    import ctypes
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.SetConsoleCtrlHandler.argtypes = (ctypes.c_void_p, wintypes.BOOL)
    kernel32.SetConsoleCtrlHandler.restype = wintypes.BOOL
    handler_routine = ctypes.WINFUNCTYPE(wintypes.BOOL, wintypes.DWORD)

    def routine(event: int) -> int:
        try:
            return 1 if handler(int(event)) else 0
        except Exception:   # an error must not leave Windows' thread (ctypes would print it and answer 0)
            log.exception("the console control handler failed")
            return 0

    callback = handler_routine(routine)
    _KEPT.append(callback)
    pointer = ctypes.cast(callback, ctypes.c_void_p)
    if not kernel32.SetConsoleCtrlHandler(pointer, True):
        log.warning("cannot hold a closed console window until the stop has ended (SetConsoleCtrlHandler: "
                    "error %d): closing it ends the server with nothing kept", ctypes.get_last_error())
        return lambda: None

    def unregister() -> None:
        kernel32.SetConsoleCtrlHandler(pointer, False)
    return unregister
