"""A child process that ends with this one, even when this one crashes or is killed: the app's server
(app/supervisor.py) and the installer's engine bench (installer/bench.py). On Linux the child asks, before its
exec, for SIGTERM when its parent thread ends (PR_SET_PDEATHSIG: the thread that started it, which must live as
long as the child does); on Windows it is put in a job object that is closed with this process. Elsewhere
(macOS) nothing: the child may outlive a crash. A Windows failure is returned as text and the caller goes on
without it.

The Windows part is not tested in CI (no Windows machine there); its layout is winnt.h's
JOBOBJECT_EXTENDED_LIMIT_INFORMATION.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

_job = None   # the one job handle, kept open for this process's lifetime (closing it ends its processes)


CREATE_NO_WINDOW = 0x08000000   # winbase.h (subprocess names it on Windows only): no console window of its own


def popen_tied(command: list[str], **kwargs) -> tuple[subprocess.Popen, str | None]:
    """`subprocess.Popen(command, **kwargs)`, the child tied to this process (no console window of its own on
    Windows); with None, or what failed to tie it (Windows: it may outlive a crash of this process). A caller's
    `preexec_fn` runs in the child after the tie's request; a caller's `creationflags` are kept, ours added."""
    proc = subprocess.Popen(command, **popen_options(kwargs, sys.platform, os.getpid()))
    return proc, kill_with_app(int(proc._handle)) if os.name == "nt" else None


def popen_options(kwargs: dict, platform: str, parent: int) -> dict:
    """Popen's keyword arguments for a child of process `parent` tied to it on `platform` (pure): on Linux the
    death-signal request before the caller's `preexec_fn`, if any; on Windows the caller's `creationflags` with
    CREATE_NO_WINDOW. Elsewhere the caller's, unchanged (Popen refuses non-zero `creationflags` off Windows)."""
    out = dict(kwargs)
    if platform == "linux":
        out["preexec_fn"] = _tie_then(parent, kwargs.get("preexec_fn"))
    elif platform == "win32":
        out["creationflags"] = int(kwargs.get("creationflags", 0)) | CREATE_NO_WINDOW
    return out


def _tie_then(parent: int, then: Callable[[], object] | None) -> Callable[[], None]:
    def preexec() -> None:
        _die_with_parent(parent)   # first: a caller's function that hangs or fails still leaves a tied child
        if then is not None:
            then()
    return preexec


if sys.platform == "linux":
    import ctypes
    import signal

    _LIBC = ctypes.CDLL(None, use_errno=True)   # loaded here: the forked child must not import anything
    _PR_SET_PDEATHSIG = 1
    _SIGTERM = int(signal.SIGTERM)


def _die_with_parent(parent: int) -> None:
    """Linux, in the child before exec: SIGTERM when the thread that started it ends, as when this process is
    killed (no orphan server or bench). A parent (process `parent`) that ended before the request sends nothing
    (prctl(2)): the child, adopted by another, ends here."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, _SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def kill_with_app(process_handle: int) -> str | None:
    """Windows: assigns the process to this process's kill-on-close job; None on success, else what went
    wrong. A no-op elsewhere."""
    if os.name != "nt":
        return None
    global _job
    try:
        import ctypes
        from ctypes import wintypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)

        class IoCounters(ctypes.Structure):
            _fields_ = [(n, ctypes.c_ulonglong) for n in (
                "ReadOperationCount", "WriteOperationCount", "OtherOperationCount",
                "ReadTransferCount", "WriteTransferCount", "OtherTransferCount")]

        class BasicLimits(ctypes.Structure):
            _fields_ = [("PerProcessUserTimeLimit", ctypes.c_int64), ("PerJobUserTimeLimit", ctypes.c_int64),
                        ("LimitFlags", wintypes.DWORD), ("MinimumWorkingSetSize", ctypes.c_size_t),
                        ("MaximumWorkingSetSize", ctypes.c_size_t), ("ActiveProcessLimit", wintypes.DWORD),
                        ("Affinity", ctypes.c_size_t), ("PriorityClass", wintypes.DWORD),
                        ("SchedulingClass", wintypes.DWORD)]

        class ExtendedLimits(ctypes.Structure):
            _fields_ = [("BasicLimitInformation", BasicLimits), ("IoInfo", IoCounters),
                        ("ProcessMemoryLimit", ctypes.c_size_t), ("JobMemoryLimit", ctypes.c_size_t),
                        ("PeakProcessMemoryUsed", ctypes.c_size_t), ("PeakJobMemoryUsed", ctypes.c_size_t)]

        kernel32.CreateJobObjectW.restype = wintypes.HANDLE
        if _job is None:
            job = kernel32.CreateJobObjectW(None, None)
            if not job:
                return f"CreateJobObject failed (error {ctypes.get_last_error()})"
            info = ExtendedLimits()
            info.BasicLimitInformation.LimitFlags = 0x2000          # JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
            if not kernel32.SetInformationJobObject(wintypes.HANDLE(job), 9, ctypes.byref(info),
                                                    ctypes.sizeof(info)):   # 9: JobObjectExtendedLimitInformation
                return f"SetInformationJobObject failed (error {ctypes.get_last_error()})"
            _job = job
        if not kernel32.AssignProcessToJobObject(wintypes.HANDLE(_job), wintypes.HANDLE(process_handle)):
            return f"AssignProcessToJobObject failed (error {ctypes.get_last_error()})"
    except Exception as e:  # the app works without it; the caller logs the reason
        return f"{type(e).__name__}: {e}"
    return None
