"""The spill thread does not write while a request holds a lookup hit: written then, a history that needs the
hit's room takes it (held entries leave a level last, when nothing else can make room) and the request reads its
whole prompt again. An agent soak (benchmarks/RESULTS.md, "Agent soak") saw it: `the cold cache entry of 7857
tokens is not used for context 0: entry gone since lookup`, the main line of a conversation evicted by a 144.6 MiB
spill in a 320 MiB cold level while main's restore of it was due. Written after the restore, the hit is in its
context and its cache copy may go.

Real engine (the tiny model, 256 bytes of KV a token) and files: no RAM level (every park is spilled), cold 1 MiB,
one 3,000-token history at a time."""

from __future__ import annotations

import time

import pytest
from strata.server.cache import CacheConfig, ConversationCache
from strata.server.cache.memory import FixedMemory

engine_mod = pytest.importorskip("strata.engine")

N = 3000


def park(cache, eng, tokens, ctx=1):
    eng.truncate(ctx, 0)
    eng.prefill(ctx, tokens)
    return cache.park(ctx, "overwrite")


def test_a_held_hit_stays_until_its_restore_and_the_spill_waits(tiny_model_factory, tmp_path):
    eng = engine_mod.Engine(tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3), n_ctx=4096, n_slots=2, n_threads=1)
    values = {"conversation_cache_mib": 0, "conversation_cache_cold_dir": str(tmp_path / "cold"),
              "conversation_cache_cold_mib": 1, "conversation_cache_sessions_dir": str(tmp_path / "sessions")}
    cache = ConversationCache(CacheConfig.from_values(values, {}), eng, memory=FixedMemory(100_000),
                              piece_bytes=64 << 10)
    a = [11] + [(7 * i) % 480 + 10 for i in range(N - 1)]
    c = [12] + [(11 * i) % 480 + 10 for i in range(N - 1)]
    assert park(cache, eng, a).destination == "disk"
    cache.flush()
    hit = cache.lookup(a + [5, 6, 7])
    assert hit is not None and hit.level == "cold" and hit.n_tokens == N
    with cache.holding(hit):
        park(cache, eng, c)                       # spilled on the spill thread, into the room of A
        time.sleep(0.5)
        assert cache.cascade.find(hit.key) is not None     # before: evicted by C's spill (a held entry leaves last)
        restored = cache.restore(hit, 2)
    assert restored.n_tokens == N, restored
    cache.flush()                                  # then C is written, and A, in context 2 now, makes room for it
    cold = cache.cascade.levels[-1]
    assert [int(e.tokens[0]) for e in cold.entries.values()] == [12]
    assert cache.parks["discard"] == 0
    cache.close(persist=False)
