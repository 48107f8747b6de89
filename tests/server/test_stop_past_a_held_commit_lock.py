"""A stop while another process (a hung server sharing the cold folder) holds that folder's commit lock: the park
of the conversation waits COMMIT_LOCK_WAIT_S for it, gives it up, says so once (the write failure's warning), and the server stops. Before, the
wait had no end and the server never stopped. Not here: the lock's wait itself (tests/cache/test_commit_lock_deadline.py)."""

from __future__ import annotations

import signal
import subprocess
import time

from strata.server.cache.fileio import COMMIT_LOCK_WAIT_S

from tests.cache.test_commit_lock_deadline import Holder
from tests.server.test_auth_and_lifecycle import listening_port, wait_healthy
from tests.server.test_terminal_closed import one_conversation, parked, start_server


def test_a_stop_gives_up_a_park_whose_commit_lock_another_process_holds(tiny_model, tmp_path):
    (tmp_path / "cold").mkdir()
    proc = start_server(tiny_model, tmp_path, stdin=subprocess.DEVNULL)
    holder = None
    try:
        port = listening_port(tmp_path / "server.log", proc)
        wait_healthy(port, proc)
        one_conversation(port)
        holder = Holder(tmp_path / "cold")
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(COMMIT_LOCK_WAIT_S + 30)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
        if holder is not None:
            holder.proc.kill()
            holder.proc.wait()
    log = (tmp_path / "server.log").read_text()
    assert proc.returncode == 0 and "Traceback" not in log, log
    assert COMMIT_LOCK_WAIT_S <= took, log
    assert log.count("cannot write to") == 1, log       # warned once, saying why
    assert "(its commit lock has been held by another process for 10.0 s" in log, log
    assert "stopped; kept for the next start" in log and parked(tmp_path) == [], log
