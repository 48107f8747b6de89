"""A session DELETE whose file removal hangs (a network folder gone, a dying disk, a big image an antivirus scans;
STRATA_TEST_SESSION_REMOVE_HANG makes the removal of a session's sidecar never return) holds neither the other
requests, the other saves in its folder, nor the stop: its files are renamed out of the way under the folder's
commit lock (the session is deleted then, and the DELETE answers), and removed on a thread of its own after it,
outside the cache's lock, the save lock and the commit lock. Meanwhile the session is not listed, a save of another
name and of its own are saved, requests are answered; the server stops with status 0, its conversation parked, the
moved files left for the next start to remove. Before eb7c665 the DELETE removed the files under the cache's lock
(the list, every save and park, and the stop's close waited for ever); before the move, under the commit lock
(every other save in the folder waited fileio.COMMIT_LOCK_WAIT_S, 10 s, and failed with a 507)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx2 as httpx

from tests.server.test_auth_and_lifecycle import listening_port, wait_healthy
from tests.server.test_terminal_closed import one_conversation, parked


def start_server(tiny_model, tmp_path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "STRATA_TEST_SESSION_REMOVE_HANG": "1"}
    env.pop("STRATA_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", "--threads", "1",
         "--model", str(tiny_model), "--ctx", "1024", "--batch", "1", "--conversation-cache-mib", "0",
         "--conversation-cache-cold-dir", str(tmp_path / "cold"), "--conversation-cache-cold-mib", "64",
         "--conversation-cache-sessions-dir", str(tmp_path / "sessions")],
        stdout=open(tmp_path / "server.log", "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        cwd=tmp_path)


def listed(url: str) -> list[str]:
    answer = httpx.get(url + "/v1/sessions", timeout=5)   # before: held by the DELETE's removal, for ever
    assert answer.status_code == 200, answer.text
    return [s["name"] for s in answer.json()["data"]]


def test_a_delete_whose_removal_hangs_holds_no_request_and_not_the_stop(tiny_model, tmp_path):
    proc = start_server(tiny_model, tmp_path)
    deleted: list[object] = []
    try:
        port = listening_port(tmp_path / "server.log", proc)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(port, proc)
        one_conversation(port)
        saved = httpx.post(url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=30)
        assert saved.status_code == 200, saved.text

        def delete() -> None:
            try:
                deleted.append(httpx.delete(url + "/v1/sessions/work", timeout=60))
            except httpx.HTTPError as exc:    # the stop ended its connection
                deleted.append(exc)
        deleting = threading.Thread(target=delete, daemon=True)
        deleting.start()
        deleting.join(30)
        assert [getattr(d, "status_code", d) for d in deleted] == [200]   # answered, its removal still hanging
        assert listed(url) == [] and moved(tmp_path)
        began = time.monotonic()
        other = httpx.post(url + "/v1/sessions/other/save", json={"slot": "main"}, timeout=30)
        assert other.status_code == 200, other.text                # before: 507 after 10 s (the commit lock)
        again = httpx.post(url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=30)
        assert again.status_code == 200, again.text
        assert time.monotonic() - began < 5 and listed(url) == ["other", "work"]
        one_conversation(port)                                     # a request is answered
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        deleting.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "server.log").read_text()
    assert proc.returncode == 0 and "Traceback" not in log, log
    assert "stopped; kept for the next start" in log and len(parked(tmp_path)) == 1, log
    # the hung removal left the first save's files moved out of the way (the next start removes them)
    assert any(".json." in n for n in moved(tmp_path))


def moved(tmp_path) -> list[str]:
    """The session files a DELETE moved out of the way (temporary names) and has not removed."""
    return [p.name for p in (tmp_path / "sessions").glob("strata-session-*.tmp")]


def test_a_bad_hung_removal_hook_stops_serve_before_the_model_loads(tmp_path):
    done = subprocess.run([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0",
                           "--model", str(tmp_path / "absent.gguf")], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env={**os.environ, "STRATA_TEST_SESSION_REMOVE_HANG": "yes"})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "STRATA_TEST_SESSION_REMOVE_HANG must be 0 or 1, got 'yes'" in done.stderr, done.stderr
