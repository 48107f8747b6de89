"""A session save by conversation that reads a parked history back from a damaged disk entry keeps what it read.

The read-back (server/history_save.py) marked the context it read into as parked ("a prefix of the entry it came
from, which stays"). But an entry damaged past its start restores its valid prefix (the restore ladder) and is
deleted as damaged: the prefix the context then held was the only copy of that conversation, and, marked parked,
it was never parked again. The next request there overwrote it (and a stop skipped it): lost.

Real server, tiny model, main only, cold level only: A is parked to cold by Q, its image flipped at 3/4, a save by A's
tokens reads its valid prefix back into main (a 404: not all of A), then R takes main and A + more asks for it."""

from __future__ import annotations

import logging
import random

import httpx2 as httpx

from tests.server.live import LiveServer, cold_only, complete, flip_at_three_quarters

A_N = 1800


def test_a_damaged_entry_read_back_for_a_save_is_parked_again_when_overwritten(tiny_model, tmp_path, caplog):
    rng = random.Random(21)
    words = lambda n: [rng.randrange(10, 500) for _ in range(n)]   # noqa: E731
    a, q, r = [11] + words(A_N - 1), [12] + words(300), [13] + words(300)
    with LiveServer(**cold_only(tiny_model, tmp_path, conversation_cache_sessions_dir=str(tmp_path / "sessions"))) as s:
        complete(s.url, a)
        complete(s.url, q)                              # parks A to cold
        cache = s.state.scheduler.cache
        cache.flush()
        cold = cache.cascade.levels[-1]
        (entry,) = [e for e in cold.entries.values() if list(e.tokens[:A_N]) == a]
        flip_at_three_quarters(entry.image_path)
        with caplog.at_level(logging.WARNING, logger="strata.cache"):
            saved = httpx.post(f"{s.url}/v1/sessions/a/save", json={"tokens": a}, timeout=120)
        assert saved.status_code == 404 and "could be read back" in saved.text, saved.text
        (warned,) = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
        # a save has no prompt: before, "the rest of the prompt read again"
        assert "prompt" not in warned and f"of {A_N} tokens read back for a session save" in warned, warned
        assert cache.damaged == 1 and entry.key not in cold.entries
        read_back = len(s.state.scheduler.table[0].tokens)
        assert 0 < read_back < A_N
        complete(s.url, r)                              # overwrites main: what it read back is parked now
        usage = complete(s.url, a + words(50))
        # before: marked parked, it was overwritten without a park (its entry deleted as damaged): cached 0
        assert usage["prompt_tokens_details"]["cached_tokens"] >= read_back - 1, usage
