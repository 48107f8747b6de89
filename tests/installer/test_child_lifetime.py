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
