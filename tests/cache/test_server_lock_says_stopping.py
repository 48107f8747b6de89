"""A holder's lock file says once its stop has begun (server_lock.say_stopping), and the refusal of a second server
of its model says it too: the app waits for a stopping holder (its stop writing its conversations) and for no other.
Its closed port was taken for that sign, but a server that has just claimed its folders and does not listen yet
(the claim comes before the bind) has no port either. Real processes, the real lock."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from strata.server.cache import server_lock

from strata.exit_status import STOPPING_SINCE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = "cd" * 32
# holds the folder; a line on its standard input begins its stop (say_stopping); its end lets the lock go
HOLDER = textwrap.dedent("""
    import sys
    from strata.server.cache import server_lock
    key = server_lock.claim("--conversation-cache-cold-dir", sys.argv[1], sys.argv[2])
    print("held", flush=True)
    sys.stdin.readline()
    server_lock.say_stopping([key, None])
    print("stopping", flush=True)
    sys.stdin.read()
""")


def test_a_holder_s_stop_is_said_in_the_refusal(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), MODEL], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(server_lock.FolderInUse) as live:
            server_lock.claim("--conversation-cache-cold-dir", str(tmp_path), MODEL, wait_s=0)
        assert f"(pid {p.pid}, running since " in str(live.value) and STOPPING_SINCE not in str(live.value), live.value
        p.stdin.write("stop\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "stopping"
        with pytest.raises(server_lock.FolderInUse) as stopping:
            server_lock.claim("--conversation-cache-cold-dir", str(tmp_path), MODEL, wait_s=0)
        assert f"(pid {p.pid}, running since " in str(stopping.value), stopping.value
        assert f", {STOPPING_SINCE} " in stopping.value.holder, stopping.value
    finally:
        p.stdin.close()
        p.wait(30)
    key = server_lock.claim("--conversation-cache-cold-dir", str(tmp_path), MODEL, wait_s=5)   # let go at its end
    server_lock.say_stopping([key])
    server_lock.release(key)


def test_a_lock_another_server_of_this_process_holds_is_not_said_stopping(tmp_path):
    first = server_lock.claim("--conversation-cache-cold-dir", str(tmp_path), MODEL)
    second = server_lock.claim("--conversation-cache-cold-dir", str(tmp_path), MODEL)
    try:
        server_lock.say_stopping([second])
        assert "stopping" not in open(tmp_path / server_lock.lock_name(MODEL), encoding="utf-8").read()
    finally:
        server_lock.release(second)
        server_lock.release(first)
