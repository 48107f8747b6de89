"""With a warm and a cold level below RAM, a clean stop writes only what the levels keep, each history straight to
the level that keeps it (session 42, item C). The cascade's hand-downs decided there (no plan): RAM's histories
were written oldest first, each arrival pushing warm's oldest down to cold and cold's out, so of ten 480 KiB
histories (warm 1 MiB, cold 2 MiB) all ten were written and four evicted within the stop ("4 of the 10
conversations written made room for newer ones"), the feed's stop.conversations saying 10. Now one plan
(stop_writes.stop_plan): the two most recently used to warm, the next four to cold, four not written; what warm
held before moves down at once, older than every write of the stop, so none of those is moved or evicted.

Real files, the simulated engine (16 KiB a token); warm and cold taken as two volumes (a move between them is a
copy), so each image the stop writes or copies is counted."""

from __future__ import annotations

import logging
import os

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_stop_writes_only_kept import CountingIO

N = 30   # tokens: 480 KiB


class TwoVolumes(CountingIO):
    def same_volume(self, a: str, b: str) -> bool:
        return False


def run(make_cache, clock, ram_mib: int, n: int, io: TwoVolumes | None = None, mark=lambda: None):
    """`io`: the cache's (a new TwoVolumes by default); `mark()` is called as the stop begins."""
    io = TwoVolumes() if io is None else io
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_park="ram", conversation_cache_mib=ram_mib,
                conversation_cache_warm_mib=1, conversation_cache_cold_mib=2)
    cache = make_cache(io=io, **make)
    seeds = {}
    for seed in range(n):   # the oldest first
        park_history(cache, history(seed, N))
        seeds[tuple(history(seed, N))] = seed
        clock.t += 1.0
    outlook, before = cache.stop_would_keep([]), len(io.images)
    mark()
    cache.close()
    again = make_cache(**make).cascade.levels
    return (len(io.images) - before, outlook, cache,
            {lvl.name: sorted(seeds[tuple(int(t) for t in e.tokens)] for e in lvl.entries.values()) for lvl in again[1:]})


def test_ten_histories_each_written_where_it_stays(make_cache, clock, caplog):
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        written, outlook, cache, kept = run(make_cache, clock, 100, 10)
    assert kept == {"warm": [8, 9], "cold": [4, 5, 6, 7]}, kept
    assert written == 6, written            # before: 10 written, then 6 copied down and 4 of them evicted
    assert sum(cache.cascade.evictions.values()) == 0
    assert outlook == 6                     # before: 10
    said = [r.getMessage() for r in caplog.records]
    assert not any("made room for newer ones" in m for m in said), said
    # neither level takes them: the line said "not written to the cold level", as if warm had them
    assert not any("not written to the cold level" in m for m in said), said
    unwritten = [m for m in said if "not written to the warm or cold level" in m]
    assert len(unwritten) == 4 and "the warm and cold levels' budgets of 1.0 and 2.0 MiB keep the 6 histories" \
        in unwritten[0], unwritten


def test_what_warm_held_moves_down_before_the_stops_writes(make_cache, clock):
    # RAM 2 MiB: 6-9 in RAM, 4 and 5 in warm, 0-3 in cold before the stop
    written, outlook, cache, kept = run(make_cache, clock, 2, 10)
    assert kept == {"warm": [8, 9], "cold": [4, 5, 6, 7]}, kept
    # 6 and 7 straight to cold, 4 and 5 copied down once; before: 6 and 7 written to warm, then copied down as 8
    # and 9 came (4 + 4)
    assert written == 4 + 2, written
    assert outlook == 4


class WarmFails(TwoVolumes):
    """Every write to warm fails (a read-only or broken volume)."""

    def open_new(self, path: str):
        if f"{os.sep}warm{os.sep}" in path:
            raise PermissionError(13, "Permission denied", path)
        return super().open_new(path)


def stop_with(make_cache, clock, io, n: int = 10):
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_park="ram", conversation_cache_mib=100,
                conversation_cache_warm_mib=1, conversation_cache_cold_mib=2)
    cache = make_cache(io=io, **make)
    seeds, keys = {}, {}
    for seed in range(n):   # the oldest first
        park_history(cache, history(seed, N))
        seeds[tuple(history(seed, N))] = seed
        clock.t += 1.0
    keys = {seeds[tuple(int(t) for t in e.tokens)]: k for k, e in cache.ram.entries.items()}
    return make, cache, seeds, keys


def kept_after(make_cache, make, seeds):
    return {lvl.name: sorted(seeds[tuple(int(t) for t in e.tokens)] for e in lvl.entries.values())
            for lvl in make_cache(**make).cascade.levels[1:]}


def test_warm_failing_at_the_stop_leaves_its_picks_to_cold(make_cache, clock, caplog):
    # the plan's warm picks (8, 9) fail: planned again, they and the newest after them fill cold. Before: each
    # failed pick was written to cold as the oldest there, and the older cold picks written after it evicted it:
    # cold kept 4-7, the two conversations used last lost
    make, cache, seeds, _ = stop_with(make_cache, clock, WarmFails())
    calls: list[tuple] = []
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache.close(progress=lambda *a: calls.append(a))
    assert kept_after(make_cache, make, seeds) == {"warm": [], "cold": [6, 7, 8, 9]}
    assert calls[-1][:2] == (4, 4) and calls[-1][2] == calls[-1][3], calls[-1]   # the lines count the 4 written
    assert sum(cache.cascade.evictions.values()) == 0
    said = [r.getMessage() for r in caplog.records]
    assert not any("made room for newer ones" in m for m in said), said
    # not "the warm and cold levels' budgets of 1.0 and 2.0 MiB keep": warm failed, cold's budget kept them out
    assert len([m for m in said if "not written to the cold level: the warm level failed the stop's writes; the cold "
                "level's budget of 2.0 MiB keeps the 4 histories" in m]) == 6, said
    # the cascade is silent while stopping: warm's failure is said once, else only the budgets were named
    failed = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(failed) == 1 and "Permission denied" in failed[0] and "nothing more to the warm level" in failed[0], \
        failed


def test_a_folder_at_one_warm_name_sends_that_history_to_cold(make_cache, clock, folders):
    # a folder stands at 9's file name in warm: warm still takes 8 and 7, cold 9 and three more (before: 9 was
    # written to cold as its oldest and evicted there by the stop's cold writes; warm kept 8 alone)
    make, cache, seeds, keys = stop_with(make_cache, clock, TwoVolumes())
    folders["warm"].mkdir(exist_ok=True)
    (folders["warm"] / f"strata-conv-{keys[9]}.img").mkdir()
    cache.close()
    assert kept_after(make_cache, make, seeds) == {"warm": [7, 8], "cold": [4, 5, 6, 9]}
    assert sum(cache.cascade.evictions.values()) == 0


class TwoSmallVolumes(TwoVolumes):
    """Warm and cold on two disks, each with 2 MiB free: room for its own picks, not for both levels' together."""

    def free_bytes(self, folder: str) -> int | None:
        return 2 << 20


def test_two_volumes_free_space_is_counted_each_its_own(make_cache, clock, caplog):
    # the plan counted warm's picks off cold's free space as well (as if one volume): 2 MiB less 0.9 could not take
    # cold's four, no plan was made, and the stop wrote all ten oldest first, four evicted within it, outlook 10
    make, cache, seeds, _ = stop_with(make_cache, clock, TwoSmallVolumes())
    outlook = cache.stop_would_keep([])
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache.close()
    assert kept_after(make_cache, make, seeds) == {"warm": [8, 9], "cold": [4, 5, 6, 7]}
    assert sum(cache.cascade.evictions.values()) == 0 and outlook == 6
    assert not any("made room for newer ones" in r.getMessage() for r in caplog.records)


def test_what_warm_sheds_for_cold_to_evict_is_not_copied_there(make_cache, clock):
    # RAM 3 MiB: 4-9 in RAM, 2 and 3 in warm, 0 and 1 in cold before the stop. The plan fills cold with 4-7: warm's
    # 2 and 3 copied down there were evicted again within the stop (8 images for 6 kept); let go in warm now
    written, outlook, cache, kept = run(make_cache, clock, 3, 10)
    assert kept == {"warm": [8, 9], "cold": [4, 5, 6, 7]}, kept
    assert written == 6, written
    assert outlook == 6
