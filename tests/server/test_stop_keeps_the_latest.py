"""At a stop the contexts' histories are written least recently used first, so a disk budget that keeps only some
keeps the latest conversations (its first-in-first-out lets the earliest written go).

Session 37's agent soak (benchmarks/RESULTS.md): at the restart four slots held 143-209 MiB histories and the cold
level's 320 MiB kept one; they were written in the contexts' order, so the one kept was slot 4's, a conversation its
client had just ended, and the three agents that went on read 6,200-7,600 tokens again (210-283 s first tokens).

Real server, tiny model (256 bytes of KV a token), main and 2 slots, no RAM level, cold 1 MiB (one 3,000-token
history): A read, then B, leaves A parked into slot 1 and B, the latest, in main (context 0, written first).
The same stop writes only what the disk keeps (cache.stop_writes, 499656d): A, which cold's first-in-first-out
would let go at once for B, is not written (before: written, then evicted)."""

from __future__ import annotations

import random

from tests.server.live import LiveServer, complete

N = 3000


def test_a_stop_over_the_disk_budget_keeps_the_latest_history(tiny_model, tmp_path):
    rng = random.Random(7)
    a, b = ([first] + [rng.randrange(10, 500) for _ in range(N - 1)] for first in (11, 12))
    flags = dict(model=str(tiny_model), ctx=4096, batch=2, threads=1, conversation_cache_mib=0,
                 conversation_cache_park="disk", conversation_cache_cold_dir=str(tmp_path / "cold"),
                 conversation_cache_cold_mib=1)
    with LiveServer(**flags) as s:
        for prompt in (a, b):
            assert complete(s.url, prompt)["prompt_tokens_details"]["cached_tokens"] == 0
        held = {c.tokens[0]: c for c in s.state.scheduler.table.contexts if c.tokens}
        # B (the latest) in a context before A's: written in the contexts' order, B was written first and let go
        assert held[12].id < held[11].id and held[12].last_use > held[11].last_use, held
        cache = s.state.scheduler.cache
    assert cache.cascade.evictions["cold"] == 0      # before 499656d: 1, A written and let go for B
    assert (cache.stop_unwritten, cache.parks["disk"]) == (1, 2)
    with LiveServer(**flags) as s:
        cold = s.state.scheduler.cache.cascade.levels[-1]
        assert [e.tokens[0] for e in cold.entries.values()] == [12]    # before: [11]
        usage = complete(s.url, b + [rng.randrange(10, 500) for _ in range(40)])
        assert usage["prompt_tokens_details"]["cached_tokens"] >= N - 1, usage


def test_stop_order_least_recently_used_first_a_running_context_last():
    from strata.server.slots import ContextState, stop_order
    cs = [ContextState(0, -1, 64, last_use=5.0), ContextState(1, 0, 64, last_use=9.0),
          ContextState(2, 0, 64, last_use=7.0, busy_job=3), ContextState(3, 0, 64), ContextState(4, 0, 64, last_use=5.0)]
    assert stop_order(cs) == [3, 0, 4, 1, 2]   # never used, then by last use (ties in order), the running one last
