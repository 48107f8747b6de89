"""A stop hands down only the histories the disk level below RAM keeps (stop_writes.hand_down_picks) and lets the
others go. Where a pick is then not written (a folder standing at its file's name, a failed write), its room is free:
the ones held back for it are written after all where they fit. They were let go before the writes, lost for
nothing, and the stop said the budget would have let them go for the ones written after them."""

from __future__ import annotations

import logging

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine


def test_a_pick_not_written_leaves_its_room_to_one_held_back(make_cache, clock, folders, caplog):
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100, conversation_cache_cold_mib=2)
    cache = make_cache(conversation_cache_park="ram", **make)
    for seed in range(3):   # 0.8 MiB each: cold's 2 MiB keeps the newest two
        assert park_history(cache, history(seed, 50)).destination == "ram"
        clock.t += 1.0
    order = [e.key for e in sorted(cache.ram.entries.values(), key=lambda e: e.sealed_at)]
    folders["cold"].mkdir(exist_ok=True)
    (folders["cold"] / f"strata-conv-{order[-1]}.img").mkdir()   # the newest cannot be written there
    calls: list[tuple] = []
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache.close(progress=lambda *a: calls.append(a))
    kept = set(make_cache(**make).cascade.levels[-1].entries)
    assert kept == set(order[:2]), (kept, order)   # before: the middle one alone, the oldest let go
    assert not [r for r in caplog.records if "not written to the cold level" in r.getMessage()]
    assert calls[-1][:2] == (2, 2) and calls[-1][-1] == 1, calls[-1]   # 2 kept, 1 refused


def test_with_every_pick_written_the_one_held_back_is_let_go(make_cache, clock, folders, caplog):
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100, conversation_cache_cold_mib=2)
    cache = make_cache(conversation_cache_park="ram", **make)
    for seed in range(3):
        assert park_history(cache, history(seed, 50)).destination == "ram"
        clock.t += 1.0
    order = [e.key for e in sorted(cache.ram.entries.values(), key=lambda e: e.sealed_at)]
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache.close(progress=lambda *a: None)
    kept = set(make_cache(**make).cascade.levels[-1].entries)
    assert kept == set(order[1:]), (kept, order)
    said = [r.getMessage() for r in caplog.records if "not written to the cold level" in r.getMessage()]
    assert len(said) == 1 and order[0] in said[0] and "keeps the 2 histories" in said[0], said
