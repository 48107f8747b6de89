"""A context whose use never ended (a session restored into a slot no request has used: `last_use` None) holds a
history of unknown last use. stop_order writes it first, as the least recent, and hand_down_picks counts a history
never used as the least recent; its park at the stop took it for the most recent instead (slots.idle_s gave None,
the park's own time), so it pushed out RAM histories used since, and the feed's outlook counted it alike."""

from __future__ import annotations

import math
import time

from strata.server.slots import ContextState, idle_s, stop_order

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine

LIVE_CTX = 2


def test_a_context_never_used_is_the_least_recent_at_the_stop(make_cache, clock, folders):
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100, conversation_cache_cold_mib=2)
    cache = make_cache(conversation_cache_park="ram", **make)
    for seed in (1, 2):                          # 0.8 MiB each, used and parked during the run
        assert park_history(cache, history(seed, 50)).destination == "ram"
        clock.t += 1.0
    live = history(9, 100)                       # 1.6 MiB, restored into a slot no request has used
    cache.engine.prefill(LIVE_CTX, live)
    never = ContextState(LIVE_CTX, 0, 1000, tokens=live)
    assert stop_order([ContextState(0, 0, 1000, last_use=time.monotonic()), never])[0] == 1   # written first
    idle = idle_s(never, time.monotonic())
    outlook = cache.stop_would_keep([(len(live), idle)])
    with cache.stop_writes():                    # the scheduler's stop: the context's history parked now
        assert cache.park(LIVE_CTX, "server stopped", idle_s=idle).destination == "ram"
    cache.close()
    cold = make_cache(**make).cascade.levels[-1]
    kept = sorted(e.n_tokens for e in cold.entries.values())
    assert kept == [50, 50], kept                # before: [100], the park's time taken for its last use
    assert outlook == len(kept), outlook         # before: 1


def test_idle_s_of_a_context_never_used_is_endless():
    assert idle_s(ContextState(0, 0, 10, tokens=[1, 2]), 5.0) == math.inf
    assert idle_s(ContextState(0, 0, 10, last_use=2.0), 5.0) == 3.0
    assert idle_s(ContextState(0, 0, 10, busy_job=7), 5.0) == 0.0
