"""A clean stop whose cold level fails its first write during the stop itself (it worked, or was never written,
before: a disk gone read-only, unplugged). e7cd115 covers a cold level failing since before the stop (left out of
the plan: warm keeps the newest); failing first within the stop, the plan placed what warm held below, its move
to cold failed, warm stayed full of its older histories and refused the stop's newer ones: RAM 6-9, warm 4 and 5,
cold 0-3 kept warm 4 and 5 and lost 6-9, the four most recently used; RAM 1 and 2, warm 0 kept 0 and 2, lost 1.
Now warm lets go of the older ones that could not move down, as when cold failed before the stop, and keeps the
newest.

Real files, the simulated engine (30 tokens: 480 KiB); warm 1 MiB, cold 2 MiB; cold's writes fail once the stop
begins."""

from __future__ import annotations

import logging
import os

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_stop_plans_warm_and_cold import N, TwoVolumes


class ColdFailsFromTheStop(TwoVolumes):
    """Cold's writes fail once `broken` is set (a move down between two volumes is a write there too)."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    def open_new(self, path: str):
        if self.broken and f"{os.sep}cold{os.sep}" in path:
            raise PermissionError(13, "Permission denied", path)
        return super().open_new(path)


def stop_with_cold_failing(make_cache, clock, caplog, ram_mib: int, n: int):
    """`n` histories parked (the oldest first) with RAM `ram_mib`, then cold broken and the cache closed. Returns
    ({level: seeds kept}, the stop's log messages)."""
    io = ColdFailsFromTheStop()
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_park="ram", conversation_cache_mib=ram_mib,
                conversation_cache_warm_mib=1, conversation_cache_cold_mib=2)
    cache = make_cache(io=io, **make)
    seeds = {}
    for seed in range(n):
        park_history(cache, history(seed, N))
        seeds[tuple(history(seed, N))] = seed
        clock.t += 1.0
    cache.flush()
    io.broken = True
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache.close()
    io.broken = False
    again = make_cache(**make).cascade.levels
    kept = {lvl.name: sorted(seeds[tuple(int(t) for t in e.tokens)] for e in lvl.entries.values()) for lvl in again[1:]}
    return kept, [r.getMessage() for r in caplog.records]


def test_warm_keeps_the_newest_when_its_oldest_cannot_move_down(make_cache, clock, caplog):
    # before the stop: RAM 6-9, warm 4 and 5, cold 0-3 (cold's removals work: one of them makes room for 4)
    kept, said = stop_with_cold_failing(make_cache, clock, caplog, 2, 10)
    assert kept["warm"] == [8, 9], kept   # before: [4, 5], and 6-9 lost
    let_go = [m for m in said if "let go" in m and "cannot take it (its writes are failing)" in m]
    assert len(let_go) == 2, said
    warned = [m for m in said if m.startswith("stopping: the cold level failed")]
    assert len(warned) == 1 and "the warm level lets go of 2 older histories it held" in warned[0], said


def test_warm_keeps_the_newest_when_cold_was_never_written(make_cache, clock, caplog):
    # before the stop: RAM 1 and 2, warm 0, cold empty
    kept, said = stop_with_cold_failing(make_cache, clock, caplog, 1, 3)
    assert kept == {"warm": [1, 2], "cold": []}, kept   # before: warm 0 and 2, 1 lost


def test_the_left_out_name_warm_s_budget_alone_once_cold_failed(make_cache, clock, caplog):
    # before the stop: RAM 4-9, warm 2 and 3, cold 0 and 1; the plan: warm 8 and 9, cold 4-7, whose writes fail
    kept, said = stop_with_cold_failing(make_cache, clock, caplog, 3, 10)
    assert kept == {"warm": [8, 9], "cold": [0, 1]}, kept
    left = [m for m in said if "(0.5 MiB) not written to the" in m]
    assert len(left) == 4, said
    # before: "not written to the warm or cold level: the warm and cold levels' budgets of 1.0 and 2.0 MiB keep the
    # 2 histories the stop writes there", as if cold's budget had room for them and kept them out
    assert all("not written to the warm level: the cold level failed the stop's writes; the warm level's budget of "
               "1.0 MiB keeps the 2 histories" in m for m in left), left
