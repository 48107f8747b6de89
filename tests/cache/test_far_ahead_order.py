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
