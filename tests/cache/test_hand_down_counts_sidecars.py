"""A stop's hand-down plan (stop_writes.hand_down_picks) weighs RAM's histories as the disk level below counts them
once written: image and sidecar (DiskEntry.n_bytes). It weighed the images alone: two newest histories whose images
fill cold's budget with a few bytes to spare were both picked and written newest first, and the older one's write
made room for its sidecar by evicting the newest, the one the stop most had to keep. Weighed whole, the newest is
picked, the next one skipped (it would push the newest out) and the oldest, smaller, fits beside it."""

from __future__ import annotations

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine

MIB = 1 << 20


def test_the_newest_history_stays_when_the_sidecars_tip_the_budget(make_cache, clock, folders):
    make = dict(engine=SimEngine(piece_bytes=PIECE, bytes_per_token=16000), conversation_cache_mib=100,
                conversation_cache_cold_mib=2)
    cache = make_cache(conversation_cache_park="ram", **make)
    for seed, n in enumerate([60, 65, 66]):   # the oldest first
        assert park_history(cache, history(seed, n)).destination == "ram"
        clock.t += 1.0
    images = {e.n_tokens: e.n_bytes for e in cache.ram.entries.values()}
    assert images[65] + images[66] <= 2 * MIB < images[65] + images[66] + 2 * 700   # the sidecars tip it
    outlook = cache.stop_would_keep([])
    cache.close()
    cold = make_cache(**make).cascade.levels[-1]
    kept = sorted(e.n_tokens for e in cold.entries.values())
    assert kept == [60, 66], kept            # before: [65], the newest evicted by the older one's write
    assert cold.used_bytes <= 2 * MIB
    assert outlook == len(kept), outlook     # the feed's stop.conversations says what the stop keeps
