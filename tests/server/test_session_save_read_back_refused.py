"""A session save by conversation whose parked history cannot be read back now (the disk read refused by the memory
floors: RAM short) is a 503 with Retry-After, as the save's own refusal is, not a 404 "not found": the history is
held, and a retry once RAM is free saves it. The read-back (server/history_save.py) took every restore that tried
nothing for an entry gone.

Real server, tiny model, main only, cold level only: A is parked to cold by Q; the floors are then raised past what
the machine has (as if RAM ran short), a save by A's tokens is refused; put back, the same save is a 200."""

from __future__ import annotations

import dataclasses
import random

import httpx2 as httpx

from tests.server.live import LiveServer, cold_only, complete

A_N = 1200
SHORT = 10 ** 9     # MiB: no machine has this much free


def test_a_read_back_refused_for_ram_is_a_503_to_retry_not_a_404(tiny_model, tmp_path):
    rng = random.Random(41)
    words = lambda n: [rng.randrange(10, 500) for _ in range(n)]   # noqa: E731
    a, q = [11] + words(A_N - 1), [12] + words(300)
    with LiveServer(**cold_only(tiny_model, tmp_path, conversation_cache_sessions_dir=str(tmp_path / "sessions"))) as s:
        complete(s.url, a)
        complete(s.url, q)                              # parks A to cold
        cache = s.state.scheduler.cache
        cache.flush()
        floors = cache.config
        cache.config = dataclasses.replace(floors, conversation_cache_min_free_mib=SHORT,
                                           conversation_cache_park_min_free_mib=SHORT)
        try:
            r = httpx.post(f"{s.url}/v1/sessions/a/save", json={"tokens": a}, timeout=120)
        finally:
            cache.config = floors
        # before: a 404 not_found_error, though A is held (the client takes it as gone and does not retry)
        assert r.status_code == 503, r.text
        assert r.headers.get("Retry-After") == "5", dict(r.headers)
        assert "refused" in r.json()["error"]["message"], r.text
        assert httpx.get(s.url + "/v1/sessions", timeout=30).json()["data"] == []
        r = httpx.post(f"{s.url}/v1/sessions/a/save", json={"tokens": a}, timeout=120)
        assert r.status_code == 200 and r.json()["n_tokens"] == A_N and r.json()["source"] == "cold", r.text
