"""A real server's clean stop writes only the contexts' histories its disk levels keep (cache.stop_writes).

Real server, tiny model (256 bytes of KV a token), main and 2 slots, no RAM level, cold 1 MiB (one 3,000-token
history): A read, then B; the stop writes A (least recently used) then B, and cold's first-in-first-out let A go
at once. Now A is not written: cold let nothing go, and the next start finds B as before."""

from __future__ import annotations

import random

from tests.server.live import LiveServer, complete

N = 3000


def test_a_stop_does_not_write_the_history_the_cold_budget_lets_go(tiny_model, tmp_path):
    rng = random.Random(7)
    a, b = ([first] + [rng.randrange(10, 500) for _ in range(N - 1)] for first in (11, 12))
    flags = dict(model=str(tiny_model), ctx=4096, batch=2, threads=1, conversation_cache_mib=0,
                 conversation_cache_park="disk", conversation_cache_cold_dir=str(tmp_path / "cold"),
                 conversation_cache_cold_mib=1)
    with LiveServer(**flags) as s:
        for prompt in (a, b):
            assert complete(s.url, prompt)["prompt_tokens_details"]["cached_tokens"] == 0
        cache = s.state.scheduler.cache
    assert cache.cascade.evictions["cold"] == 0      # before: 1, A written and let go for B
    assert (cache.stop_unwritten, cache.parks["disk"]) == (1, 2)
    with LiveServer(**flags) as s:
        cold = s.state.scheduler.cache.cascade.levels[-1]
        assert [e.tokens[0] for e in cold.entries.values()] == [12]
        usage = complete(s.url, b + [rng.randrange(10, 500) for _ in range(40)])
        assert usage["prompt_tokens_details"]["cached_tokens"] >= N - 1, usage
