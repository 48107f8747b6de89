"""The RAM path of a clean stop's plan with the spill writer taking a queued history (K) between the plan's lock
section and SpillWriter.leave_out (session 43's leftover 1: the set kept was thought to differ by one from the
plan). K was taken off the queue before the stop's hold and waits for the cache's lock at its turn; the plan is
made while it waits; the writer's turn then reads the plan's `_for_hand_down`, set in the plan's own lock section,
so K follows the plan whether the plan writes it at its turn (the newest: to warm) or leaves it to the hand-down
(the oldest: let go for newer ones), and leave_out, after K's turn, leaves out nothing twice. Pinned here: the
levels keep what the feed's outlook (the same plan) said, and the lines' N never grows back.

Real files, the simulated engine (60 tokens: 0.94 MiB), RAM 100 MiB, warm 1 MiB (one history), cold 2 MiB (two).
The interleaving is forced by the test alone: it holds the cache's lock across K's park, and SpillWriter.leave_out
is wrapped on this one instance to let the writer through first (no hook in the cache)."""

from __future__ import annotations

import pytest

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_stop_plan_write_under_way import _writer_at
from tests.cache.test_stop_progress_within_an_entry import wait_for

N_TOKENS = 60


@pytest.mark.parametrize("k_idle_s, kept", [
    (None, {"warm": [4], "cold": [2, 3]}),   # K used first: left to the hand-down, let go for 2-4
    (0.0, {"warm": [1], "cold": [3, 4]}),    # K used last: written to warm at its turn
])
def test_a_key_taken_between_the_plan_and_its_leave_out_follows_the_plan(make_cache, clock, k_idle_s, kept):
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100, conversation_cache_warm_mib=1,
                conversation_cache_cold_mib=2)
    cache = make_cache(conversation_cache_park="disk", **make)
    cache._lock.acquire()   # K's turn waits on it (the writer past the hold the stop is about to take)
    held = True
    try:
        park_history(cache, history(1, N_TOKENS))   # K
        wait_for(lambda: _writer_at(cache, "_spill_turn"))
        cache.park_target = "ram"
        for seed in (2, 3, 4):
            clock.t += 1.0
            cache.engine.truncate(1, 0)
            cache.engine.prefill(1, history(seed, N_TOKENS))
            # K used last: the others used long before it (their idle time at their park)
            idle = None if k_idle_s is None else 100.0 - seed
            assert cache.park(1, "test", idle_s=idle).destination == "ram"
        outlook = cache.stop_would_keep([])
        leave_out, taken = cache._spill.leave_out, []

        def writer_first(keys) -> None:   # the plan's lock section ended: K's turn runs before leave_out
            nonlocal held
            cache._lock.release()
            held = False
            wait_for(lambda: cache._spill._keys_done >= 1)
            taken.append(set(keys))
            leave_out(keys)

        cache._spill.leave_out = writer_first
        with cache.stop_writes():
            pass
    finally:
        if held:
            cache._lock.release()
    assert taken, "leave_out was not reached"
    calls: list[tuple] = []
    cache.close(progress=lambda *a: calls.append(a))
    seeds = {history(s, N_TOKENS)[6]: s for s in (1, 2, 3, 4)}
    again = {lvl.name: sorted(seeds[e.tokens[6]] for e in lvl.entries.values())
             for lvl in make_cache(**make).cascade.levels[1:]}
    assert again == kept, again
    assert outlook == 3
    assert [c[1] for c in calls] == sorted(c[1] for c in calls), calls   # N never falls: no history counted, then dropped
    assert calls[-1][:2] == (3, 3), calls
