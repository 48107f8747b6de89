"""The wall clock going backwards (an NTP step, a dual-boot machine's RTC in local time, a reset RTC): the cache's
own times never go back, so the newest history is never the first evicted, and an entry sealed "in the future"
still ages."""

from __future__ import annotations

import json

from strata.server.cache.steady_clock import steady_now

from tests.cache.conftest import history, park_history

CONV = "strata-conv-"


def cold_only(make_cache, **extra):
    # 2 MiB holds three 40-token histories (640 KiB each at the simulated engine's 16 KiB a token)
    return make_cache(conversation_cache_mib=0, conversation_cache_park="disk", conversation_cache_cold_mib=2, **extra)


def park_a_second_apart(cache, clock, seeds) -> list:
    """Parks a history per seed, each written to disk, one second apart; returns them."""
    parked = [history(s) for s in seeds]
    for h in parked:
        park_history(cache, h)
        cache.flush()
        clock.t += 1
    return parked


def kept(cache, tokens) -> bool:
    hit = cache.lookup(list(tokens) + [1, 4])
    return hit is not None and hit.n_tokens == len(tokens)


def test_after_the_clock_goes_back_the_newest_history_is_not_the_one_evicted(make_cache, clock):
    cache = cold_only(make_cache)
    old = park_a_second_apart(cache, clock, (1, 2, 3))
    clock.t = 100.0      # 15 minutes back
    new = park_a_second_apart(cache, clock, (4, 5))
    assert [kept(cache, h) for h in old + new] == [False, False, True, True, True]


def test_after_a_restart_with_the_clock_behind_the_files_the_newest_is_kept(make_cache, clock, folders):
    first = cold_only(make_cache)
    old = park_a_second_apart(first, clock, (1, 2, 3))
    first.close()
    clock.t = 100.0      # the machine restarts with its clock behind (an RTC in local time, a dead battery)
    again = cold_only(make_cache)
    new = park_a_second_apart(again, clock, (4, 5))
    assert [kept(again, h) for h in old + new] == [False, False, True, True, True]
    # written after the newest file: sealed after it, not 15 minutes before
    sealed = sorted(json.loads(p.read_text())["sealed_at"] for p in folders["cold"].glob(f"{CONV}*.json"))
    assert len(sealed) == 3 and 1002 <= sealed[0] <= sealed[-1] <= 1003, sealed   # on from the newest, by 1 s

def test_an_entry_sealed_in_the_future_still_ages(make_cache, clock):
    cache = cold_only(make_cache, conversation_cache_cold_max_age_s=3600)
    h = history(1)
    park_history(cache, h)
    cache.flush()
    clock.t -= 86400     # a day back
    cache.enforce()      # (upkeep runs now and then)
    assert kept(cache, h)
    clock.t += 2 * 3600  # then two hours pass
    cache.enforce()
    assert not kept(cache, h)
    assert cache.cascade.age_evictions["cold"] == 1


def test_when_the_clock_is_put_right_again_it_is_trusted(make_cache, clock):
    cache = cold_only(make_cache)
    park_history(cache, history(1))
    cache.flush()
    clock.t = 100.0
    assert cache.clock() >= 1000.0
    clock.t = 5000.0     # NTP puts it right (or a suspend): ahead of everything seen
    assert cache.clock() == 5000.0


def test_steady_now_goes_on_from_the_latest_time_while_the_wall_clock_is_behind():
    assert steady_now(wall=50.0, last_wall=40.0, last_now=30.0) == 50.0      # ahead: the wall time
    assert steady_now(wall=10.0, last_wall=40.0, last_now=40.0) == 40.0      # went back: holds
    assert steady_now(wall=15.0, last_wall=10.0, last_now=40.0) == 45.0      # then counts on
    assert steady_now(wall=60.0, last_wall=15.0, last_now=45.0) == 60.0      # caught up


def test_a_sidecar_sealed_past_year_9999_is_damage_not_the_newest_entry_for_good(make_cache, clock, folders):
    first = cold_only(make_cache)
    park_history(first, history(1))
    first.close()
    (sidecar,) = folders["cold"].glob(f"{CONV}*.json")
    d = json.loads(sidecar.read_text())
    d["sealed_at"] = 1e300
    sidecar.write_text(json.dumps(d))
    again = cold_only(make_cache)
    cold = again.cascade.levels[0]
    assert dict(cold.skipped) == {"damaged": 1} and dict(cold.removed) == {"damaged": 1}
    assert again.clock() == clock.t


def test_the_clock_going_back_is_said_once_and_its_catching_up_once(caplog):
    import logging

    from strata.server.cache.steady_clock import SteadyClock

    wall = [1000.0]
    clock = SteadyClock(lambda: wall[0])
    caplog.set_level(logging.INFO, logger="strata.cache")
    assert clock() == 1000.0
    wall[0] = 999.5                      # half a second: followed, not said
    assert clock() == 1000.0
    wall[0] = 400.0
    assert [clock() for _ in range(3)] == [1000.0] * 3
    wall[0] = 410.0
    assert clock() == 1010.0
    wall[0] = 2000.0
    assert clock() == 2000.0
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "600 s behind" in said[0] and "past the newest time" in said[1], said


def test_one_file_sealed_years_ahead_among_others_does_not_age_the_others(make_cache, clock, folders, caplog):
    """A file a clock set years ahead once wrote (a wrong date typed in, a bad RTC): its seal is not the cache's
    time, or every other entry would be years old at once, expired by the level's max age."""
    first = cold_only(make_cache, conversation_cache_cold_max_age_s=3600)
    kept_ones = park_a_second_apart(first, clock, (1, 2, 3))
    first.close()
    newest = max(folders["cold"].glob(f"{CONV}*.json"), key=lambda p: json.loads(p.read_text())["sealed_at"])
    d = json.loads(newest.read_text())
    d["sealed_at"] += 10 * 365 * 86400
    newest.write_text(json.dumps(d))
    again = cold_only(make_cache, conversation_cache_cold_max_age_s=3600)
    assert again.clock() == clock.t
    again.enforce()
    assert [kept(again, h) for h in kept_ones] == [True, True, True]
    assert "1 file sealed more than a day ahead" in caplog.text
    clock.t += 2 * 3600          # and it ages with the rest: counted as sealed when the cache opened
    again.enforce()
    assert [kept(again, h) for h in kept_ones] == [False, False, False]


def test_when_every_file_is_ahead_it_is_the_clock_that_went_back(make_cache, clock, folders):
    """All seals far ahead: the wall clock is the wrong one (a reset RTC); the cache counts on from the newest."""
    first = cold_only(make_cache)
    park_a_second_apart(first, clock, (1, 2))
    first.close()
    clock.t -= 30 * 86400
    again = cold_only(make_cache)
    assert again.clock() >= clock.t + 30 * 86400 - 2


def test_which_seals_are_trusted():
    from strata.server.cache.steady_clock import FAR_AHEAD_S, far_ahead_limit

    assert far_ahead_limit([], 1000.0) is None
    assert far_ahead_limit([900.0, 1000.0 + FAR_AHEAD_S], 1000.0) is None            # a day ahead: another host's
    assert far_ahead_limit([900.0, 1001.0 + FAR_AHEAD_S], 1000.0) == 1000.0 + FAR_AHEAD_S
    assert far_ahead_limit([1e9, 2e9], 1000.0) is None                                 # every one: the clock is wrong
