"""A clean stop whose cold level was failing its writes before it began (read-only, a broken disk): warm keeps the
stop's newest histories, not the older ones it held. With no plan for a failing level, the cascade's order wrote
each of RAM's histories to warm, whose oldest could not move down to cold: every write was refused and its history
lost, warm kept 0 and 1 and the stop's six, 4-9, were lost. Now the plan covers warm alone: its two most recently
used, 8 and 9, take warm's room, 0 and 1 are let go there (they could not move down), and one WARNING says so.

Real files, the simulated engine (30 tokens: 480 KiB); RAM 3 MiB, warm 1 MiB, cold 2 MiB (never written)."""

from __future__ import annotations

import logging
import os

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_stop_plans_warm_and_cold import N, TwoVolumes, kept_after


class ColdFails(TwoVolumes):
    """Every write to cold fails."""

    def open_new(self, path: str):
        if f"{os.sep}cold{os.sep}" in path:
            raise PermissionError(13, "Permission denied", path)
        return super().open_new(path)


def test_warm_keeps_the_newest_when_cold_cannot_take_its_oldest(make_cache, clock, caplog):
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_park="ram", conversation_cache_mib=3,
                conversation_cache_warm_mib=1, conversation_cache_cold_mib=2)
    cache = make_cache(io=ColdFails(), **make)
    seeds = {}
    for seed in range(10):   # the oldest first: 0 and 1 reach warm, cold refuses them (and warns)
        park_history(cache, history(seed, N))
        seeds[tuple(history(seed, N))] = seed
        clock.t += 1.0
    assert kept_after(make_cache, make, seeds) == {"warm": [0, 1], "cold": []}
    outlook = cache.stop_would_keep([])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache.close()
    assert kept_after(make_cache, make, seeds) == {"warm": [8, 9], "cold": []}   # before: warm 0 and 1, 4-9 lost
    assert outlook == 2
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1, warned   # before: "6 conversation histories could not be written to disk"
    assert warned[0].startswith("stopping: the cold level is failing") and "the warm level keeps the 2 most " \
        "recently used histories the stop writes, and lets go of 2 older ones" in warned[0], warned
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "not written to the warm level: its budget of 1.0 MiB keeps" in m]) == 4, said


def test_one_history_kept_is_said_as_one(make_cache, clock, caplog):
    # park to disk: 0 and 1 written to warm, 2 refused (warm's oldest could not move down) and kept in RAM
    make = dict(engine=SimEngine(piece_bytes=PIECE), conversation_cache_park="disk", conversation_cache_mib=3,
                conversation_cache_warm_mib=1, conversation_cache_cold_mib=2)
    cache = make_cache(io=ColdFails(), **make)
    for seed in range(3):
        park_history(cache, history(seed, N))
        clock.t += 1.0
    cache.flush()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache.close()
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1, warned
    # before: "the warm level keeps the 1 most recently used histories the stop writes"
    assert "the warm level keeps the one history the stop writes, and lets go of 1 older one it held" in warned[0], \
        warned
