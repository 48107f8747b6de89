"""Windows: puts the server process in a job object that is closed with the app, so that the server
ends when the app ends, even when the app crashes or is killed (what PR_SET_PDEATHSIG does on Linux,
see supervisor.py). A no-op elsewhere; any failure is returned as text and the app goes on without it.

Not tested in CI (no Windows machine there); the layout below is winnt.h's
JOBOBJECT_EXTENDED_LIMIT_INFORMATION.
"""

from __future__ import annotations

import os

_job = None   # the one job handle, kept open for the app's lifetime (closing it ends its processes)


def kill_with_app(process_handle: int) -> str | None:
    """Assigns the process to the app's kill-on-close job; None on success, else what went wrong."""
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
