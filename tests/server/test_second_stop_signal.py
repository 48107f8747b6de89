"""A second Ctrl-C while the stop writes the conversations to disk says that the stop goes on, once. In the crash,
disk and restart trial (2026-12-06) a second SIGTERM / SIGINT during a stop was taken in silence: a big model's
stop writes for minutes, and a user pressing Ctrl-C again saw nothing happen (then reaches for kill, losing what
was not written yet). The stop itself is unchanged: it ends with the conversation written and status 0.

Real `strata serve` (tiny model) in a subprocess, its disk writes slowed (STRATA_TEST_DISK_WRITE_DELAY_S) so the
stop's write of the conversation lasts seconds: the second signal is sent once the stop has said it keeps one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from strata.server.cli import ALREADY_STOPPING

from tests.server.test_auth_and_lifecycle import listening_port, wait_healthy
from tests.server.test_terminal_closed import one_conversation, parked

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

WRITE_DELAY_S = "2"     # each write of the stop's one history (its image, its sidecar) waits this long


def test_a_second_ctrl_c_while_the_stop_writes_says_the_stop_goes_on(tiny_model, tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "STRATA_TEST_DISK_WRITE_DELAY_S": WRITE_DELAY_S}
    env.pop("STRATA_API_KEY", None)
    log_path = tmp_path / "server.log"
    log_file = open(log_path, "w")    # closed below: the child holds its own copy
    proc = subprocess.Popen(
        [sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", "--threads", "1",
         "--model", str(tiny_model), "--ctx", "1024", "--batch", "1", "--conversation-cache-mib", "0",
         "--conversation-cache-cold-dir", str(tmp_path / "cold"), "--conversation-cache-cold-mib", "64"],
        stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        port = listening_port(log_path, proc)
        wait_healthy(port, proc)
        one_conversation(port)
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 60
        while "stopping: keeping" not in log_path.read_text():    # its write has begun (seconds long)
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
        log_file.close()
    log = log_path.read_text()
    assert proc.returncode == 0 and "Traceback" not in log, log
    assert log.count(ALREADY_STOPPING) == 1, log          # before: nothing said
    assert log.index("stopping: keeping") < log.index(ALREADY_STOPPING) < log.index("stopped; kept"), log
    assert len(parked(tmp_path)) == 1, log                # the stop went on to the end
