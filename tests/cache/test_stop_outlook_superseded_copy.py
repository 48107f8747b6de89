"""The feed's stop.conversations (ConversationCache.stop_would_keep) says what the stop's `keeping N` lines will. A
shorter copy in RAM of a history RAM holds whole (parked after it) is never written where the longer one is: the stop
keeps one of the two. The outlook counted both."""

from __future__ import annotations

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.conftest import conversation_images as images
from tests.cache.sim_engine import SimEngine


def test_the_outlook_counts_a_superseded_copy_once(make_cache, clock, folders):
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100,
                       conversation_cache_park="ram", conversation_cache_cold_mib=100)
    for tokens in (history(1, 60), history(1, 40), history(2, 30)):   # the newer turn first, then its older copy
        assert park_history(cache, tokens).destination == "ram"
        clock.t += 1.0
    outlook = cache.stop_would_keep([])
    cache.close()
    assert len(images(folders["cold"])) == 2
    assert outlook == 2, outlook    # before: 3


def test_the_outlook_counts_the_copy_kept_where_the_longer_is_left_out(make_cache, clock, folders):
    """Where the longer history does not fit beside newer ones, the stop keeps its shorter copy in its place."""
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100,
                       conversation_cache_park="ram", conversation_cache_cold_mib=2)
    for tokens in (history(1, 60), history(1, 20), history(2, 50), history(3, 50)):   # 0.3, 0.8, 0.8 MiB
        assert park_history(cache, tokens).destination == "ram"
        clock.t += 1.0
    outlook = cache.stop_would_keep([])
    cache.close()
    kept = len(images(folders["cold"]))
    assert outlook == kept, (outlook, kept)
