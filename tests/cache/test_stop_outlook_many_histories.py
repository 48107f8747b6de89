"""The monitor's stop outlook (ConversationCache.stop_would_keep, in each GET /v1/monitor) holds the cache lock while
it finds RAM's histories a longer one there supersedes: it compared every pair (an agent's histories share a long
system prompt, so each pair compared thousands of tokens), 1.1 s under the lock with 400 histories on this 2-core
machine, every request's park and lookup waiting. Sorted by their token ids, a history's longer copies follow it at
once: one comparison each."""

from __future__ import annotations

import time

from strata.server.cache.parking import replaces, superseded_keys

from tests.cache.conftest import PIECE, park_history
from tests.cache.sim_engine import SimEngine


def test_many_histories_take_the_lock_briefly(make_cache, clock):
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE, bytes_per_token=64, capacity=8000),
                       conversation_cache_mib=4000, conversation_cache_park="ram", conversation_cache_cold_mib=4000)
    system = list(range(1000, 4000))
    for seed in range(400):   # one shared system prompt, each history its own length, each odd one a shorter copy
        tail = [5000 + seed // 2] + [7] * (600 - seed)   # of the one before (parked after it: it stays in RAM)
        assert park_history(cache, [1, *system, *tail]).destination == "ram"
        clock.t += 1.0
    # this thread's CPU time, not the wall clock's: the work done under the lock is what grew with every pair, and a
    # busy machine (CI, a shared 2-core box) stretched the wall time of the same work past the bound (0.26 s, flaky)
    with cache._lock:
        began = time.thread_time()
        later = cache._superseded_in_ram()
        took = time.thread_time() - began
    entries = list(cache.ram.entries.values())
    assert later == {e.key for e in entries if any(replaces(o.tokens, e) for o in entries if o is not e)}
    assert len(later) == 200
    assert took < 0.1, f"{took:.2f} s under the cache lock"
    began = time.thread_time()
    cache.stop_would_keep([])
    took = time.thread_time() - began
    assert took < 0.2, f"{took:.2f} s for the outlook"


def test_superseded_keys_are_the_strict_prefixes():
    class E:
        kind = "conversation"

        def __init__(self, key, tokens):
            import numpy as np
            self.key, self.tokens = key, np.array(tokens, np.int32)

        @property
        def n_tokens(self):
            return int(self.tokens.shape[0])

    entries = [E("a", [1, 2]), E("b", [1, 2, 3]), E("c", [1, 2, 3, 4]), E("d", [2]), E("e", [1, 3]),
               E("f", []), E("g", [-1, 5]), E("h", [-1])]
    assert superseded_keys(entries) == {"a", "b", "f", "h"}
