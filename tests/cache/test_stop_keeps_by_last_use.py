"""A stop, and the feed's outlook of it (ConversationCache.stop_would_keep), keep RAM's and the contexts' histories
by their last use, not by when each was parked: a context's history is parked at the stop itself, so an idle slot's
history from ten minutes ago looked newest and pushed out two RAM histories used since (the outlook alike: it put
the contexts first). The park carries the context's last use (idle_s: RamEntry.used_at)."""

from __future__ import annotations

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine

LIVE_CTX = 2


def test_an_idle_context_parked_at_the_stop_yields_to_histories_used_since(make_cache, clock, folders):
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100, conversation_cache_cold_mib=2)
    cache = make_cache(conversation_cache_park="ram", **make)
    live = history(9, 100)                       # 1.6 MiB, last used 600 s before the stop
    cache.engine.prefill(LIVE_CTX, live)
    for seed in (1, 2):                          # 0.8 MiB each, used and parked since
        assert park_history(cache, history(seed, 50)).destination == "ram"
        clock.t += 1.0
    outlook = cache.stop_would_keep([(len(live), 600.0)])
    with cache.stop_writes():                    # the scheduler's stop: the context's history parked now
        assert cache.park(LIVE_CTX, "server stopped", idle_s=600.0).destination == "ram"
    cache.close()
    cold = make_cache(**make).cascade.levels[-1]
    kept = sorted(e.n_tokens for e in cold.entries.values())
    assert kept == [50, 50], kept                # before: [100], the idle one parked last taken for the newest
    assert outlook == len(kept), outlook         # before: 1


def test_a_bad_idle_time_is_named(make_cache):
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100,
                       conversation_cache_park="ram", conversation_cache_cold_mib=2)
    cache.engine.prefill(LIVE_CTX, history(3, 20))
    for bad in (-1.0, float("nan"), "5"):
        try:
            cache.park(LIVE_CTX, "test", idle_s=bad)
        except ValueError as e:
            assert repr(bad) in str(e) and "idle_s" in str(e)
        else:
            raise AssertionError(f"idle_s={bad!r} taken")
    assert not cache.ram.entries                 # nothing parked by a refused call
