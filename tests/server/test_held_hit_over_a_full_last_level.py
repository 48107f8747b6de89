"""A held cache hit is restored even when the last level must give it up for the park before its restore.

Held entries leave a level last, but under tiny budgets nothing else could make room and the last level deleted the
hit: an agent soak (benchmarks/RESULTS.md, session 30) saw one `entry gone since lookup`, a held cold hit evicted
while main's history was parked. The level now keeps both for the restore, over its budget by the hit, and lets the
hit go as its hold ends (policy.plan_demotions, "after_hold").

Real server, tiny model (256 bytes of KV a token), main only, RAM 1 MiB and cold 1 MiB (one 3,000-token history
each): A, B, C read in turn leave A in cold, B in RAM, C in main; A's continuation displaces C into RAM, which hands
B down to cold, which holds only A."""

from __future__ import annotations

import random

from tests.server.live import LiveServer, complete

N = 3000


def test_the_only_entry_of_a_full_last_level_is_restored_before_it_goes(tiny_model, tmp_path):
    rng = random.Random(7)
    a, b, c = ([first] + [rng.randrange(10, 500) for _ in range(N - 1)] for first in (11, 12, 13))
    with LiveServer(model=str(tiny_model), ctx=4096, batch=0, threads=1, conversation_cache_mib=1,
                    conversation_cache_cold_dir=str(tmp_path / "cold"), conversation_cache_cold_mib=1) as s:
        for prompt in (a, b, c):
            assert complete(s.url, prompt)["prompt_tokens_details"]["cached_tokens"] == 0
        cache = s.state.scheduler.cache
        cold = cache.cascade.levels[-1]
        assert [e.tokens[0] for e in cold.entries.values()] == [11]
        usage = complete(s.url, a + [rng.randrange(10, 500) for _ in range(40)])
        assert usage["prompt_tokens_details"]["cached_tokens"] >= N, usage      # before: 0, A read again
        # A, restored into main, made room for B as its hold ended: cold within its budget, nothing held
        assert [e.tokens[0] for e in cold.entries.values()] == [12]
        assert cold.used_bytes <= cold.budget_bytes and not cache.cascade.held
        assert cache.cascade.evictions["cold"] == 1 and cache.parks["discard"] == 0
