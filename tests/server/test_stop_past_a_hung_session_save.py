"""A bare `strata serve` stopped while a session save's write hangs (a network folder gone, a dying disk). The stop
gave the save's call up as stuck, then the cache's close waited for the save's lock for ever: only the app's 15 s
silence rule ended such a server. Now close waits while the save writes, and gives up a save that has written
nothing for cache.SAVE_STALL_S, with a warning naming the session not saved; the conversations are still kept and
the process ends. The half-written temporary file is never trusted: the next start removes it (its writer is gone)
and the session saved before is the one listed and restored.

The real serve entry runs in a child process (hung_session_save_child.py: the hung write must end with it), its
allowances scaled down; without the fix the child never ended (killed at this test's timeout)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx

from tests.server.live import LiveServer

HERE = Path(__file__).resolve().parent


def test_a_stop_gives_a_hung_session_save_up_and_the_next_start_drops_its_part(tiny_model, tmp_path, caplog):
    sessions, cold = tmp_path / "sessions", tmp_path / "cold"
    began = time.monotonic()
    run = subprocess.run([sys.executable, str(HERE / "hung_session_save_child.py"), str(tiny_model), str(sessions),
                          str(cold)], capture_output=True, text=True, timeout=240,
                         env={**os.environ, "STRATA_TEST_SESSION_WRITE_HANG_AFTER": "1000000"})
    took = time.monotonic() - began
    err = run.stderr
    assert run.returncode == 0, err[-3000:]
    first = json.loads(run.stdout.split("first save: ", 1)[1].splitlines()[0])
    assert "has not ended after" in err, err[-3000:]                     # the stop gave the save's call up
    given_up = [line for line in err.splitlines() if "the save of session 'work' has written nothing for" in line]
    assert len(given_up) == 1 and "WARNING" in given_up[0], err[-3000:]
    assert "session 'work' is not saved" in given_up[0] and "MiB written" in given_up[0], given_up
    assert "stopped; kept for the next start" in err and "(1 entry" in err, err[-3000:]   # the parked conversation
    assert took < 120, took
    left = sorted(p.name for p in sessions.iterdir())
    temps = [n for n in left if n.endswith(".tmp")]
    assert len(temps) == 1 and ".img." in temps[0], left                # the hung write's part, left by its process
    assert len(left) == 3, left                                         # beside the first save's sidecar and image

    with caplog.at_level(logging.INFO, logger="strata.cache"):
        with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1,
                        conversation_cache_sessions_dir=str(sessions)) as server:
            listed = httpx.get(server.url + "/v1/sessions", timeout=30).json()["data"]
            restored = httpx.post(server.url + "/v1/sessions/work/restore", json={"slot": "main"}, timeout=60)
            swept = server.state.cache.sessions.level.swept
    assert [(s["name"], s["n_tokens"]) for s in listed] == [("work", first["n_tokens"])], listed
    assert restored.status_code == 200 and restored.json()["n_tokens"] == first["n_tokens"], restored.text
    assert [name for name, _ in swept] == temps and "is not running" in swept[0][1], swept
    assert any(temps[0] in r.getMessage() and "did not finish" in r.getMessage() for r in caplog.records)
    assert sorted(p.name for p in sessions.iterdir()) == [n for n in left if n not in temps]
