"""Files a clock set wrong sealed far ahead are counted as sealed when the cache opens (_reseal_far_ahead). They
were all resealed at that one time, so their own order was lost: first-in-first-out fell back on their keys (the
fault 5bba942 fixed at a stop), and the newer of two could go first. Resealed in their order, the older goes first."""

from __future__ import annotations

import json

from tests.cache.conftest import history

from .test_clock_backwards import CONV, cold_only, kept, park_a_second_apart

YEARS = 10 * 365 * 86400


def test_files_sealed_far_ahead_keep_their_order_among_themselves(make_cache, clock, folders):
    first = cold_only(make_cache)
    parked = park_a_second_apart(first, clock, (1, 2, 3))
    first.close()
    sidecars = {tuple(json.loads(p.read_text())["tokens"]): p for p in folders["cold"].glob(f"{CONV}*.json")}
    ahead = parked[1:]     # written by a clock ten years ahead; the one whose key sorts last sealed first
    older, newer = sorted(ahead, key=lambda h: json.loads(sidecars[tuple(h)].read_text())["key"], reverse=True)
    for h, t in ((older, clock.t + YEARS), (newer, clock.t + YEARS + 1)):
        d = json.loads(sidecars[tuple(h)].read_text())
        d["sealed_at"] = t
        sidecars[tuple(h)].write_text(json.dumps(d))
    again = cold_only(make_cache)
    # two more histories: room made for each, oldest first (the one sealed at its real time, then the older of the two)
    clock.t += 1
    park_a_second_apart(again, clock, (4, 5))
    assert [kept(again, h) for h in (parked[0], older, newer)] == [False, False, True]
    assert all(kept(again, history(s)) for s in (4, 5))


def _set_ahead(folders, clock, histories) -> None:
    sidecars = {tuple(json.loads(p.read_text())["tokens"]): p for p in folders["cold"].glob(f"{CONV}*.json")}
    for i, h in enumerate(histories):
        d = json.loads(sidecars[tuple(h)].read_text())
        d["sealed_at"] = clock.t + YEARS + i
        sidecars[tuple(h)].write_text(json.dumps(d))


def seals(folders) -> list[float]:
    return sorted(json.loads(p.read_text())["sealed_at"] for p in folders["cold"].glob(f"{CONV}*.json"))


def test_the_reseal_is_written_to_the_files_so_a_later_start_does_not_trust_them(make_cache, clock, folders):
    """The reseal was made in the index only: once the files sealed at their real times were gone (evicted, aged
    out), the next start found only far-ahead seals, took the wall clock for the wrong one and trusted them all: the
    cache's clock jumped ten years ahead (said as the clock being 315,360,000 s behind), every later file was sealed
    there, and a file written by a right clock (another server on the folder) was then older than all of them:
    evicted first however new, while the far-ahead ones, resealed at that start's time, outlived it."""
    first = cold_only(make_cache, conversation_cache_cold_max_age_s=3600)
    parked = park_a_second_apart(first, clock, (1, 2, 3))
    first.close()
    _set_ahead(folders, clock, parked[1:])
    clock.t += 2 * 3600                         # the next start, two hours on: the one sealed at its time ages out
    again = cold_only(make_cache, conversation_cache_cold_max_age_s=3600)
    again.enforce()
    assert [kept(again, h) for h in parked] == [False, True, True]
    assert seals(folders) == [clock.t - 1e-3, clock.t]  # resealed on disk too, in their order, ending at the wall time
    again.close()
    clock.t += 60
    third = cold_only(make_cache, conversation_cache_cold_max_age_s=3600)
    assert third.clock() == clock.t                     # not ten years ahead
    park_a_second_apart(third, clock, (4,))
    assert max(seals(folders)) < clock.t                # a new file sealed at the wall time, not ten years on
    third.close()
    # a right clock's newer file (another server sharing the folder) goes after the two older ones, not before
    other = cold_only(make_cache)
    park_a_second_apart(other, clock, (5, 6))
    assert [kept(other, h) for h in (*parked[1:], history(4), history(5), history(6))] == [False, False, True, True,
                                                                                          True]


def test_in_a_read_only_folder_the_reseal_is_this_runs_only(make_cache, clock, folders, caplog):
    from .test_read_only_folder import read_only

    first = cold_only(make_cache)
    parked = park_a_second_apart(first, clock, (1, 2, 3))
    first.close()
    _set_ahead(folders, clock, parked[1:])
    before = seals(folders)
    with read_only(folders["cold"]):
        again = cold_only(make_cache)
        assert again.clock() == clock.t
        assert seals(folders) == before
        assert "2 of those cannot be resealed on disk, counted as sealed now in this run only" in caplog.text
        cold = again.cascade.levels[0]
        assert sorted(e.sealed_at for e in cold.entries.values()) == [1000.0, clock.t - 1e-3, clock.t]
        again.close(persist=False)
