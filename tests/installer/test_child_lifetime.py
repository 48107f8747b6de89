"""strata/child_lifetime.py on Linux: a tied child asks, between its fork and its exec, for SIGTERM when its parent
ends (PR_SET_PDEATHSIG). A parent that ended before that request (killed in that instant: the app's server or the
setup bench just starting) sends nothing: the child ran on, orphaned (a whole bench, or a server holding its port).
The child now ends at once when its parent is no longer the one that started it. Real processes, the real prctl."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")

# a parent that forks and ends at once; its child asks only once its parent has ended, as a child does whose parent
# was killed between the fork and the request, then stays 30 s unless it is ended
ORPHAN = r"""
import os, sys, time
from strata import child_lifetime
parent = os.getpid()
pid = os.fork()
if pid:
    print(pid, flush=True)
    os._exit(0)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)     # the test reads the parent's output to its end
while os.getppid() == parent:
    time.sleep(0.005)
child_lifetime._die_with_parent(parent)
time.sleep(30)
"""


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaps, its parent gone, has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_whose_parent_ended_before_it_asked_ends_at_once():
    out = subprocess.run([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         timeout=60, check=True)
    child = int(out.stdout.strip())
    deadline = time.monotonic() + 5
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert not running(child), "the orphaned child runs on"
    finally:
        if running(child):
            os.kill(child, 9)


def test_a_child_whose_parent_runs_is_not_ended(tmp_path):
    """The check ends only an orphan: a tied child of a running parent runs its command (and is ended with it)."""
    from strata.child_lifetime import popen_tied

    proc, untied = popen_tied([sys.executable, "-c", "print('ran')"], stdout=subprocess.PIPE, text=True)
    assert untied is None and proc.communicate(timeout=60)[0] == "ran\n" and proc.returncode == 0


# the child says whether it asked for SIGTERM at its parent's end (PR_GET_PDEATHSIG) and whether it leads its own
# process group (what the caller's preexec_fn below does)
SAYS = r"""
import ctypes, os
sig = ctypes.c_int(0)
ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)
print(sig.value, os.getpgid(0) == os.getpid())
"""


def test_a_callers_preexec_fn_runs_and_the_child_is_still_tied():
    """popen_tied replaced a caller's preexec_fn with its own, silently: it now runs after the tie's request."""
    import signal

    from strata.child_lifetime import popen_tied

    proc, _ = popen_tied([sys.executable, "-c", SAYS], stdout=subprocess.PIPE, text=True,
                         preexec_fn=lambda: os.setpgid(0, 0))
    out = proc.communicate(timeout=60)[0].split()
    assert proc.returncode == 0 and out == [str(int(signal.SIGTERM)), "True"], out


def test_creationflags_compose():
    """A caller's creationflags were a TypeError (given twice to Popen): on Linux the caller's go to Popen as they
    are (0 runs; Popen refuses others off Windows); on Windows they are OR'ed with CREATE_NO_WINDOW."""
    from strata.child_lifetime import CREATE_NO_WINDOW, popen_options, popen_tied

    proc, _ = popen_tied([sys.executable, "-c", SAYS], stdout=subprocess.PIPE, text=True, creationflags=0)
    assert proc.communicate(timeout=60)[0].split()[1] == "False" and proc.returncode == 0
    new_group = 0x00000200   # CREATE_NEW_PROCESS_GROUP
    assert popen_options({"creationflags": new_group}, "win32", 1) == {"creationflags": new_group | CREATE_NO_WINDOW}
    assert popen_options({}, "win32", 1) == {"creationflags": CREATE_NO_WINDOW}
    assert popen_options({"creationflags": 0, "cwd": "/"}, "darwin", 1) == {"creationflags": 0, "cwd": "/"}
