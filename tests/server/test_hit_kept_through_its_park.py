"""A conversation cache hit is not evicted by the park of the history it is about to replace.

A request whose prompt the cache holds longer than its context does parks the context's history first, then
restores the hit. That park can make the levels hand down and the last level delete its oldest entry, and the
oldest was often the hit itself: the restore then found "entry gone since lookup" and the whole prompt was read
again. An agent soak (benchmarks/RESULTS.md, "Agent soak") lost a 7,315-token history so, read again in 25 s on
one thread. Main is displaced before the request's lookup even runs (parking.displace_main), so there the hit
was gone before it was found. The hit is now held across both parks (parking.holding_hit, and row_start from
lookup to restore): the level deletes the next oldest instead.

Real server, tiny model (256 bytes of KV a token), main only, RAM 1 MiB (one 3,000-token history), cold 2 MiB
(two): A, B, C, D read in turn leave A and B in cold, C in RAM, D in main; A's continuation then parks D, which
hands C down to cold, which must delete one entry."""

from __future__ import annotations

import random

import httpx2 as httpx

from tests.server.live import LiveServer, complete

N = 3000


def test_the_hit_stays_and_the_next_oldest_is_deleted(tiny_model, tmp_path):
    rng = random.Random(5)
    a, b, c, d = ([first] + [rng.randrange(10, 500) for _ in range(N - 1)] for first in (11, 12, 13, 14))
    with LiveServer(model=str(tiny_model), ctx=4096, batch=0, threads=1, conversation_cache_mib=1,
                    conversation_cache_cold_dir=str(tmp_path / "cold"), conversation_cache_cold_mib=2) as s:
        for prompt in (a, b, c, d):
            assert complete(s.url, prompt)["prompt_tokens_details"]["cached_tokens"] == 0
        cache = s.state.scheduler.cache
        cold = cache.cascade.levels[-1]
        assert sorted(len(e.tokens) for e in cold.entries.values()) == [N, N]
        usage = complete(s.url, a + [rng.randrange(10, 500) for _ in range(40)])
        assert usage["prompt_tokens_details"]["cached_tokens"] >= N, usage      # before: 0, A read again
        assert cache.cascade.evictions["cold"] == 1
        kept = {tuple(e.tokens[:1]) for e in cold.entries.values()}
        assert kept == {(11,), (13,)}, kept      # A (restored, still there) and C, handed down; B, the next oldest, left
        assert not cache.cascade.held            # nothing stays held after the restore
        assert 'strata_cache_evictions_total{level="cold"} 1' in httpx.get(s.url + "/metrics", timeout=30).text
