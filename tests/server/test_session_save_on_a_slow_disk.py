"""A session save that writes for longer than the backend's wait is waited for while its pieces are written.

The wait gave a session call up after WAIT_S (10 minutes) in which the worker read no prompt piece and ended no
call, but a save is one call that only writes: a big context's image on a slow disk (12 GiB at 20 MB/s) was answered
503 'still under way' while its pieces went on being written. Found by running the session tests with
STRATA_TEST_DISK_WRITE_DELAY_S=0.5 (a slow CI disk): test_session_rebuild_edges' saves were 503s under its
WAIT_S of 1 s. Here, scaled down alike: WAIT_S 1.5 s, each write 0.3 s late, a save of several pieces."""

from __future__ import annotations

import time

import httpx2 as httpx
from strata.server import sessions_backend

from tests.server.live import LiveServer
from tests.server.test_cache_and_policy import complete, ids

WAIT_S = 1.5
WRITE_DELAY_S = "0.3"      # each write (one piece of the image, the sidecar) this late: the save's pieces move


def test_a_save_longer_than_the_wait_is_waited_for_while_it_writes(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(sessions_backend, "WAIT_S", WAIT_S)
    monkeypatch.setattr(sessions_backend, "POLL_S", 0.1)
    monkeypatch.setenv("STRATA_TEST_DISK_WRITE_DELAY_S", WRITE_DELAY_S)   # read by the cache the server makes
    with LiveServer(model=str(tiny_model), ctx=4096, batch=0, threads=1, conversation_cache_mib=16,
                    conversation_cache_park_min_free_mib=0, conversation_cache_min_free_mib=0,
                    conversation_cache_sessions_dir=str(tmp_path / "sessions")) as s:
        complete(s.url, ids(3000, 81))
        t0 = time.monotonic()
        r = httpx.post(s.url + "/v1/sessions/long/save", json={"slot": "main"}, timeout=120)
        took = time.monotonic() - t0
        assert r.status_code == 200, r.text          # before: 503 'still under way: ... read no prompt piece'
        assert took > 2 * WAIT_S, f"the save took {took:.1f} s: the disk was not slow, the test shows nothing"
        assert r.json()["n_tokens"] >= 3000
        listed = [x["name"] for x in httpx.get(s.url + "/v1/sessions").json()["data"]]
        assert listed == ["long"], listed
