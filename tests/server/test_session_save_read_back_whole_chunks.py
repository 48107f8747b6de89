"""A session save by conversation reads a parked history back into a context that can take all of it.

The read-back (server/history_save.py) chose an idle context by its size alone (session_match.pick_restore_context:
a blank slot first). But a cache entry longer than a context restores there only its longest prefix of whole
snapshot chunks that fits (256 tokens a chunk): a slot of 600 tokens takes 512 of a 1,000-token entry. A save of that
entry's first 550 tokens was read back into the blank slot (it "fits" 550), 512 came back, and the save was a 404
("only 512 of its tokens could be read back") while main, idle, could take all of it.

Real server, tiny model (chunks of 256 tokens), main 4,096 and one slot of 600: A (1,000 tokens) runs in main and is
parked to the RAM cache when Q takes main (A does not fit the slot); the slot stays blank."""

from __future__ import annotations

import random

import httpx2 as httpx

from tests.server.live import LiveServer, complete

A_N, SAVED_N = 1000, 550


def test_a_history_read_back_goes_where_its_whole_chunks_fit(tiny_model, tmp_path):
    rng = random.Random(31)
    words = lambda n: [rng.randrange(10, 500) for _ in range(n)]   # noqa: E731
    a, q = [11] + words(A_N - 1), [12] + words(300)
    with LiveServer(model=str(tiny_model), ctx=4096, batch=1, slot_ctx=600, threads=1, conversation_cache_mib=16,
                    conversation_cache_park_min_free_mib=0, conversation_cache_min_free_mib=0,
                    conversation_cache_sessions_dir=str(tmp_path / "sessions")) as s:
        complete(s.url, a)
        complete(s.url, q)                              # parks A to RAM: the slot holds 600
        table = s.state.scheduler.table
        assert not table[1].tokens and table[0].tokens[:1] == [12]
        r = httpx.post(f"{s.url}/v1/sessions/part/save", json={"tokens": a[:SAVED_N]}, timeout=120)
        # before: read back into the blank slot, 512 tokens: a 404
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["slot"], body["source"], body["n_tokens"]) == ("main", "ram", SAVED_N), body
