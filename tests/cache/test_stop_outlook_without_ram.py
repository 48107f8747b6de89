"""The feed's stop.conversations (ConversationCache.stop_would_keep) with no RAM level: the contexts' histories
parked at the stop go to the spill queue, whose plan (stop_writes.unkept_at_stop) writes only those the last disk
level keeps. The feed counted them all (len(live) + the queue: 'the most it writes'), so with cold's 2 MiB and ten
0.5 MiB contexts it said 10 where the stop's lines said 4 kept."""

from __future__ import annotations

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine

N = 30   # tokens: 480 KiB


def test_the_outlook_counts_what_the_queues_plan_keeps(make_cache, clock):
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=0, conversation_cache_park="disk",
                conversation_cache_cold_mib=2)
    cache = make_cache(**make)
    live = [(N, float(10 - seed)) for seed in range(10)]   # (tokens, seconds idle), the oldest first
    outlook = cache.stop_would_keep(live[::-1])             # the feed gives them the most recently used first
    with cache.stop_writes():                               # the scheduler's stop: least recently used first
        for seed in range(10):
            park_history(cache, history(seed, N))
    cache.close()
    kept = len(make_cache(**make).cascade.levels[-1].entries)
    assert kept == 4
    assert outlook == kept, outlook                         # before: 10
