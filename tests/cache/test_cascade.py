"""The cascade RAM -> warm -> cold on real files: exact order of degradations and evictions, all or
nothing, only the last level deletes, age limits re-sealed on every move."""

from __future__ import annotations

import os
import tempfile

import pytest
from strata.server.cache.fileio import FullDiskIO

from tests.cache.conftest import history, park_history

KEYS = {}


def park_sequence(cache, clock, n):
    keys = []
    for s in range(n):
        clock.t += 1
        r = park_history(cache, history(s))
        assert r.destination == "ram", r.reason
        keys.append(r.key)
    return keys


def level_keys(cache, name):
    lvl = cache.cascade.levels[cache.cascade.index_of(name)]
    return sorted(lvl.entries, key=lambda k: (lvl.entries[k].sealed_at, k))


def files(folder):
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_degrade_order_and_only_cold_deletes(make_cache, clock):
    # Each history: 40 tokens x 16 KiB = 640 KiB. RAM holds 1, warm 3, cold 3.
    cache = make_cache(conversation_cache_mib=1, conversation_cache_warm_mib=2, conversation_cache_cold_mib=2)
    k = park_sequence(cache, clock, 8)
    ev = [(a, lvl, key) for a, lvl, key, _ in cache.cascade.events]
    expected = [
        ("degrade", "ram", k[0]),
        ("degrade", "ram", k[1]),
        ("degrade", "ram", k[2]),
        ("degrade", "warm", k[0]), ("degrade", "ram", k[3]),
        ("degrade", "warm", k[1]), ("degrade", "ram", k[4]),
        ("degrade", "warm", k[2]), ("degrade", "ram", k[5]),
        ("evict", "cold", k[0]), ("degrade", "warm", k[3]), ("degrade", "ram", k[6]),
    ]
    assert ev == expected
    assert level_keys(cache, "ram") == [k[7]]
    assert level_keys(cache, "warm") == [k[4], k[5], k[6]]
    assert level_keys(cache, "cold") == [k[1], k[2], k[3]]
    c = cache.cascade
    assert (c.degradations["ram"], c.degradations["warm"], c.degradations["cold"]) == (7, 4, 0)
    assert (c.evictions["ram"], c.evictions["warm"], c.evictions["cold"]) == (0, 0, 1)  # degradations are not evictions
    # the files are where the index says, one image + one sidecar per entry
    cold = cache.cascade.levels[2]
    assert files(cold.folder) == sorted(f"strata-conv-{key}.{ext}" for key in (k[1], k[2], k[3]) for ext in ("img", "json"))


def test_reseal_on_degrade_and_age_limits(make_cache, clock):
    cache = make_cache(conversation_cache_mib=100, conversation_cache_warm_mib=100, conversation_cache_cold_mib=100,
                       conversation_cache_ram_max_age_s=10, conversation_cache_warm_max_age_s=10,
                       conversation_cache_cold_max_age_s=10)
    (k,) = park_sequence(cache, clock, 1)
    clock.t += 11
    cache.enforce()
    warm = cache.cascade.levels[1]
    assert list(warm.entries) == [k] and warm.entries[k].sealed_at == clock.t  # re-sealed
    clock.t += 5
    cache.enforce()
    assert list(warm.entries) == [k]  # 5 s in warm: not yet
    clock.t += 6
    cache.enforce()
    cold = cache.cascade.levels[2]
    assert list(cold.entries) == [k] and cold.entries[k].sealed_at == clock.t
    assert cold.entries[k].created_at == 1001.0  # creation survives the moves
    clock.t += 11
    cache.enforce()
    assert not cold.entries and files(cold.folder) == []
    c = cache.cascade
    assert c.age_evictions["cold"] == 1 and c.evictions["cold"] == 0
    assert c.degradations["ram"] == 1 and c.degradations["warm"] == 1


def test_when_full_reject_moves_nothing(make_cache, clock):
    cache = make_cache(conversation_cache_mib=1, conversation_cache_warm_mib=1, conversation_cache_cold_mib=1,
                       conversation_cache_when_full="reject")
    k = park_sequence(cache, clock, 4)
    # k0: ram -> warm -> cold; k1: ram -> warm; k3 arrives: warm's k1 cannot go to the full cold level
    # (reject), so warm refuses k2 from RAM, cold (tried next) refuses it too, and RAM (which cannot stay
    # over budget) evicts k2.
    assert level_keys(cache, "cold") == [k[0]]
    assert level_keys(cache, "warm") == [k[1]]
    assert level_keys(cache, "ram") == [k[3]]
    c = cache.cascade
    assert c.refusals["cold"] == 2 and c.refusals["warm"] == 1
    assert c.evictions["cold"] == 0 and c.evictions["warm"] == 0 and c.evictions["ram"] == 1
    assert [e[:3] for e in c.events][-4:] == [("refuse", "cold", k[1]), ("refuse", "warm", k[2]),
                                              ("refuse", "cold", k[2]), ("evict", "ram", k[2])]
    warm = cache.cascade.levels[1]
    assert files(warm.folder) == sorted(f"strata-conv-{k[1]}.{e}" for e in ("img", "json"))


def test_too_large_for_next_level_stays(make_cache, clock):
    cache = make_cache(conversation_cache_mib=0, conversation_cache_warm_mib=2, conversation_cache_cold_mib=1)
    park_history(cache, history(1, n_tokens=100))  # 1.6 MiB: fits warm, not cold
    cache.flush()
    warm = cache.cascade.levels[0]
    assert len(warm.entries) == 1
    clock.t += 1
    park_history(cache, history(2, n_tokens=40))
    cache.flush()
    # warm must make room: the big entry cannot go to cold (too large), so warm refuses the newcomer,
    # which is written to cold instead (it was discarded: a new-user trial)
    assert len(warm.entries) == 1 and cache.cascade.refusals["cold"] == 1
    cold = cache.cascade.levels[1]
    assert [e.n_tokens for e in cold.entries.values()] == [40]
    assert cache.parks["discard"] == 0 and cache.spill_failures == 0


def test_a_spill_too_large_for_the_first_disk_level_goes_to_the_next(make_cache, caplog):
    """A new-user trial: an 8 MB history and a 5 MiB warm level; it was kept in RAM (or discarded) while
    the cold level had room."""
    cache = make_cache(conversation_cache_mib=0, conversation_cache_warm_mib=1, conversation_cache_cold_mib=10)
    with caplog.at_level("INFO", logger="strata.cache"):
        park_history(cache, history(3, n_tokens=100))  # 1.6 MiB: more than warm's whole budget
        cache.flush()
    warm, cold = cache.cascade.levels
    assert not warm.entries and [e.n_tokens for e in cold.entries.values()] == [100]
    assert cache.spill_failures == 0 and cache.parks["discard"] == 0
    assert any("written to the cold level instead" in r.getMessage() and "> the whole warm budget of 1.0 MiB" in r.getMessage()
               for r in caplog.records)


def test_io_error_during_degrade_moves_nothing(make_cache, clock, folders):
    io = FullDiskIO(capacity=10 << 20)
    cache = make_cache(io=io, conversation_cache_mib=1, conversation_cache_warm_mib=5, conversation_cache_cold_mib=5)
    k = park_sequence(cache, clock, 2)
    warm = cache.cascade.levels[1]
    assert list(warm.entries) == [k[0]]
    io.capacity = io.written  # the disk is now full: every write fails with ENOSPC
    ok, why = cache.cascade.degrade(1, k[0], clock.t)
    assert not ok and "No space left" in why
    assert list(warm.entries) == [k[0]] and os.path.exists(warm.entries[k[0]].image_path)
    cold = cache.cascade.levels[2]
    assert files(cold.folder) == []  # no temporary or partial file left behind
    # and RAM -> warm under ENOSPC: the RAM entry cannot move, so RAM evicts it (counted)
    clock.t += 1
    park_history(cache, history(9))
    assert cache.cascade.evictions["ram"] == 1 and k[1] not in warm.entries
    assert [f for f in files(warm.folder) if f.endswith(".tmp")] == []


def test_degrade_across_volumes_copies_then_deletes(make_cache, clock, folders):
    shm = "/dev/shm"
    if not os.path.isdir(shm) or os.stat(shm).st_dev == os.stat(folders["cold"].parent).st_dev:
        pytest.skip("no second volume (/dev/shm) here")
    with tempfile.TemporaryDirectory(dir=shm) as warm_dir:
        cache = make_cache(conversation_cache_mib=1, conversation_cache_warm_dir=warm_dir,
                           conversation_cache_warm_mib=1, conversation_cache_cold_mib=5)
        k = park_sequence(cache, clock, 3)
        cold = cache.cascade.levels[2]
        assert list(cold.entries) == [k[0]]
        assert files(warm_dir) == sorted(f"strata-conv-{k[1]}.{e}" for e in ("img", "json"))
        # the moved copy restores
        hit = cache.lookup(history(0) + [1, 2, 3])
        assert hit.level == "cold" and cache.restore(hit, 2).n_tokens == 40
        cache.close(persist=False)


def test_age_limits_apply_on_park(make_cache, clock):
    cache = make_cache(conversation_cache_mib=100, conversation_cache_warm_mib=100, conversation_cache_ram_max_age_s=10)
    (k0,) = park_sequence(cache, clock, 1)
    clock.t += 11
    r = park_history(cache, history(50))
    assert level_keys(cache, "ram") == [r.key] and level_keys(cache, "warm") == [k0]
    assert cache.cascade.events[-1][:3] == ("degrade", "ram", k0) and "age" in cache.cascade.events[-1][3]


def test_a_ram_entry_the_warm_level_refuses_goes_to_cold(make_cache, clock):
    """RAM over its budget hands its oldest down; warm cannot take one larger than its whole budget, so it
    went out as a RAM eviction while cold had room (a new-user trial with a 5 MiB warm level)."""
    cache = make_cache(conversation_cache_mib=2, conversation_cache_warm_mib=1, conversation_cache_cold_mib=10)
    big = park_history(cache, history(40, n_tokens=100)).key  # 1.6 MiB: fits RAM, not warm
    clock.t += 1
    park_history(cache, history(41, n_tokens=100))  # RAM must make room: big goes down
    assert level_keys(cache, "cold") == [big]
    c = cache.cascade
    assert c.evictions["ram"] == 0 and c.refusals["warm"] == 1
    assert ("degrade", "ram", big) in [e[:3] for e in c.events]


def test_histories_degraded_together_leave_the_next_level_oldest_first(make_cache, clock):
    """One plan that hands several entries down at once (a big history arriving in a full warm level) sealed them
    all at one `now` in the cold level, where first-in-first-out then fell back on the keys: the next room made
    there could let a newer one go before the oldest. Sealed in the plan's order, the oldest goes first."""
    # 40 tokens = 640 KiB: RAM holds 1, warm 6 (4 MiB), cold 6; the 240-token history (3.75 MiB) empties warm
    cache = make_cache(conversation_cache_mib=1, conversation_cache_warm_mib=4, conversation_cache_cold_mib=4)
    k = park_sequence(cache, clock, 7)
    assert level_keys(cache, "warm") == k[:6] and level_keys(cache, "ram") == [k[6]]
    clock.t += 1
    park_history(cache, history(100, 240))                  # too big for RAM: spilled to warm, which hands all six down
    cache.flush()
    assert sorted(level_keys(cache, "cold")) == sorted(k[:6])
    assert level_keys(cache, "cold") == k[:6]   # (sealed_at, key): the order cold's first-in-first-out deletes in


def test_entries_nested_plans_hand_down_leave_the_last_level_in_their_order(make_cache, clock):
    """A full RAM level handing three histories to a full warm level at once: each one's arrival makes warm hand two
    down (a plan inside the plan). Each inner plan sealed from its own `now + 0`, one step after the last: its first
    tied with the previous inner plan's second in cold (sealed 1 us and 2 us twice), where first-in-first-out then
    fell back on the keys and a newer history went before an older. Sealed in the order they arrive, never tied."""
    # 40 tokens = 640 KiB, 80 = 1.25 MiB: warm (4 MiB) holds the six small ones, RAM (4 MiB) three larger ones,
    # which a 240-token history (3.75 MiB) sends down, each making warm hand two small ones to cold
    cache = make_cache(conversation_cache_mib=4, conversation_cache_warm_mib=4, conversation_cache_cold_mib=64)
    small = []
    for s in range(6):
        clock.t += 1
        small.append(park_history(cache, history(s, 40)).key)
    for s in range(3):
        clock.t += 1
        park_history(cache, history(10 + s, 80))
    cache.flush()
    assert level_keys(cache, "warm") == small
    clock.t += 1
    park_history(cache, history(100, 240))
    cache.flush()
    cold = cache.cascade.levels[cache.cascade.index_of("cold")]
    assert level_keys(cache, "cold") == small     # (sealed_at, key): the order cold's first-in-first-out deletes in
    assert len({e.sealed_at for e in cold.entries.values()}) == 6      # no two tied


def test_an_eviction_is_said_in_the_log(make_cache, clock, caplog):
    # a history let go is read again whole if its conversation comes back: the log names it, its level, size and
    # why (a soak's slow turn could not be traced to the write that pushed its history out of cold)
    cache = make_cache(conversation_cache_mib=1, conversation_cache_warm_mib=2, conversation_cache_cold_mib=2)
    with caplog.at_level("INFO", logger="strata.cache"):
        k = park_sequence(cache, clock, 8)
    said = [r.getMessage() for r in caplog.records if "let go" in r.getMessage()]
    assert len(said) == 1, said   # one eviction (cold's oldest); the degradations are not said
    assert said[0].startswith(f"conversation cache cold level: conversation {k[0]} (0.6 MiB) let go (budget: ")
