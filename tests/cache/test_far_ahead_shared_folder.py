"""Two servers share a cache folder; one's clock is a year behind. At its start the other's files look sealed far
ahead (steady_clock.far_ahead_limit), and its reseal rewrote their sidecars at its own (wrong) time: to the server
with the right clock they then looked a year old, aged out at once by a max age or evicted first. From the seals
alone neither server can tell whose clock is wrong (each sees the other's files far ahead), so a start rewrites
only the sidecars its own clock sealed (`sealed_by`, steady_clock.clock_id); another host's files count as sealed
now in its own index, for that run only.

Real files, simulated engine (a 40-token history is 640 KiB), cold 2 MiB (three histories), two caches on one
folder, each with its own injected clock and clock id."""

from __future__ import annotations

import json
import logging
import time

import pytest
from strata.server.cache import CacheConfig, ConversationCache
from strata.server.cache.memory import FixedMemory
from strata.server.cache.steady_clock import clock_id

from tests.cache.conftest import PIECE, Clock, history, park_history
from tests.cache.sim_engine import SimEngine, SimFormat

YEAR = 365 * 86400.0
CONV = "strata-conv-"


def open_cache(folders, clock, sealed_by, **extra):
    values = {"conversation_cache_mib": 0, "conversation_cache_park": "disk", "conversation_cache_cold_mib": 2,
              "conversation_cache_cold_dir": str(folders["cold"]),
              "conversation_cache_sessions_dir": str(folders["sessions"]), **extra}
    return ConversationCache(CacheConfig.from_values(values, {}), SimEngine(), image_format=SimFormat,
                             memory=FixedMemory(100_000), clock=clock, piece_bytes=PIECE, sealed_by=sealed_by)


def park(cache, clock, seeds):
    for s in seeds:
        park_history(cache, history(s))
        cache.flush()
        clock.t += 1


def sidecars(folders) -> dict[int, dict]:
    out = {}
    for p in folders["cold"].glob(f"{CONV}*.json"):
        d = json.loads(p.read_text())
        out[d["tokens"][6]] = d          # the first word of the first message tells the seeds apart
    return out


def sidecar_of(folders, seed: int) -> dict:
    return sidecars(folders)[history(seed)[6]]


def mine_and_ahead(folders, ahead_name: str, mine_name: str = "host-new", ahead_runs_on: bool = False):
    """A right clock's file (seed 2, sealed by `mine_name`), then one a clock a year ahead sealed under `ahead_name`
    (seed 1). Returns both clocks and, when `ahead_runs_on`, the ahead server's cache still open (else None)."""
    mine = Clock(time.time())
    a = open_cache(folders, mine, mine_name)
    park(a, mine, (2,))
    a.close()
    ahead = Clock(time.time() + YEAR)
    other = open_cache(folders, ahead, ahead_name)
    park(other, ahead, (1,))
    if not ahead_runs_on:
        other.close()
    return mine, ahead, other if ahead_runs_on else None


def kept(cache, seed) -> bool:
    hit = cache.lookup(history(seed) + [1, 4])
    return hit is not None and hit.n_tokens == len(history(seed))


def test_a_clock_behind_does_not_rewrite_the_right_clocks_files(folders, caplog):
    right, behind = Clock(1000.0 + YEAR), Clock(1000.0)
    a = open_cache(folders, behind, "host-behind")
    park(a, behind, (1,))                          # its own file, sealed a year before the other's
    a.close()
    b = open_cache(folders, right, "host-right")
    park(b, right, (2, 3))
    b.close()
    before = {k: d["sealed_at"] for k, d in sidecars(folders).items()}
    behind.t += 60
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        again = open_cache(folders, behind, "host-behind")    # sees 2 and 3 a year ahead of its clock
    # in its own index they count as sealed now (they do not move its clock a year on) ...
    assert again.clock() == pytest.approx(behind.t)
    cold = again.cascade.levels[0]
    assert sorted(e.sealed_at for e in cold.entries.values())[-2:] == pytest.approx([behind.t - 1e-3, behind.t])
    again.close()
    # ... but their files keep the seals the right clock gave them (before: rewritten a year back)
    assert {k: d["sealed_at"] for k, d in sidecars(folders).items()} == before
    assert "2 of those sealed by another host's clock" in caplog.text
    right.t += 60
    b2 = open_cache(folders, right, "host-right", conversation_cache_cold_max_age_s=3600)
    b2.enforce()
    assert [kept(b2, s) for s in (2, 3)] == [True, True]   # before: a year old, aged out at once
    b2.close()


def test_its_own_far_ahead_files_are_still_rewritten(folders):
    clock = Clock(1000.0)
    a = open_cache(folders, clock, "host-a")
    park(a, clock, (1, 2))
    a.close()
    second = history(2)
    for p in folders["cold"].glob(f"{CONV}*.json"):   # the second one was sealed by this clock set a year ahead
        d = json.loads(p.read_text())
        if d["tokens"] == second:
            d["sealed_at"] += YEAR
            p.write_text(json.dumps(d))
    clock.t += 60
    again = open_cache(folders, clock, "host-a")
    again.close()
    assert sorted(d["sealed_at"] for d in sidecars(folders).values()) == pytest.approx([1000.0, clock.t])


def test_the_sidecars_name_the_clock_and_a_bad_name_is_refused(folders):
    clock = Clock(1000.0)
    a = open_cache(folders, clock, None)
    park(a, clock, (1,))
    a.close()
    assert [d["sealed_by"] for d in sidecars(folders).values()] == [clock_id()]
    assert clock_id("one-host") == clock_id("one-host") != clock_id("another-host")
    assert "one-host" not in clock_id("one-host")
    with pytest.raises(ValueError, match="sealed_by must be a non-empty string naming this clock, got ''"):
        open_cache(folders, clock, "")
