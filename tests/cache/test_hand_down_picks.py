"""stop_writes.hand_down_picks (pure): which of RAM's histories a stop hands down to the one disk level below it
keeps whole, the most recently used first (by the last-use times passed, not the order given); None where the
outcome is not certain (all are written then)."""

from __future__ import annotations

import pytest
from strata.server.cache.stop_writes import hand_down_picks

MIB = 1 << 20


def newest_first(n: int) -> list[float]:
    """Last uses for `n` histories given the most recently used first."""
    return [float(n - i) for i in range(n)]


@pytest.mark.parametrize(("sizes", "budget", "free", "when_full", "taken", "picks"), [
    ([3, 3, 3], 10, 100, "evict", 0, [0, 1, 2]),         # all fit: all written
    ([4, 4, 4, 4], 10, 100, "evict", 0, [0, 1]),         # the newest two; the older ones would be pushed out
    ([6, 6, 3], 10, 100, "evict", 0, [0, 2]),            # one that does not fit is skipped, a smaller older one fits
    ([4, 4, 4], 10, 100, "evict", 5, [0]),               # the room picked already (taken) is counted
    ([11, 2], 10, 100, "evict", 0, [1]),                 # larger than the whole budget: never kept
    ([], 10, 100, "evict", 0, []),
    ([4, 4, 4], 0, 100, "evict", 0, None),               # no budget: the level keeps all
    ([4, 4, 4], 10, 100, "reject", 0, None),             # reject: the level refuses, evicting nothing
    ([4, 4, 4], 10, None, "evict", 0, None),             # free space not known
    ([4, 4, 4], 10, 7, "evict", 0, None),                # the volume's room, not the budget, decides
])
def test_picks(sizes, budget, free, when_full, taken, picks):
    used = newest_first(len(sizes))
    assert hand_down_picks(sizes, used=used, budget=budget, free=free, when_full=when_full, taken=taken) == picks


@pytest.mark.parametrize(("sizes", "used", "picks"), [
    ([4, 4, 4, 4], [10.0, 50.0, 20.0, 40.0], [1, 3]),    # the two used last, whatever order they were parked in
    ([4, 4, 4], [7.0, 7.0, 9.0], [2, 0]),                # ties in the order given
    ([6, 3, 6], [1.0, 2.0, 3.0], [2, 1]),                # one that does not fit is skipped by last use too
    ([4, 4, 4], [float("-inf"), 0.0, -5.0], [1, 2]),     # a history never used counts as the least recent
])
def test_picks_follow_last_use(sizes, used, picks):
    assert hand_down_picks(sizes, used=used, budget=10, free=100, when_full="evict") == picks


def test_the_picks_fit_together_and_none_left_out_would_fit_beside_them():
    sizes = [MIB * s for s in (3, 7, 2, 5, 1, 4, 6, 2)]
    budget = 12 * MIB
    picks = hand_down_picks(sizes, used=newest_first(len(sizes)), budget=budget, free=1 << 40, when_full="evict")
    assert sum(sizes[i] for i in picks) <= budget
    for i in set(range(len(sizes))) - set(picks):   # each left out did not fit beside the more valuable picks
        assert sum(sizes[j] for j in picks if j < i) + sizes[i] > budget


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"sizes": [1, -2], "budget": 10, "free": 100, "when_full": "evict"}, "-2"),
    ({"sizes": [1.5], "budget": 10, "free": 100, "when_full": "evict"}, "1.5"),
    ({"sizes": [1], "budget": True, "free": 100, "when_full": "evict"}, "True"),
    ({"sizes": [1], "budget": 10, "free": -1, "when_full": "evict"}, "-1"),
    ({"sizes": [1], "budget": 10, "free": 100, "when_full": "drop"}, "'drop'"),
    ({"sizes": [1], "budget": 10, "free": 100, "when_full": "evict", "taken": "5"}, "'5'"),
    ({"sizes": [1, 2], "used": [1.0], "budget": 10, "free": 100, "when_full": "evict"}, "one last use per history"),
    ({"sizes": [1], "used": ["now"], "budget": 10, "free": 100, "when_full": "evict"}, "'now'"),
    ({"sizes": [1], "used": [float("nan")], "budget": 10, "free": 100, "when_full": "evict"}, "nan"),
])
def test_bad_input_is_named(kwargs, named):
    sizes = kwargs.pop("sizes")
    kwargs.setdefault("used", newest_first(len(sizes)))
    with pytest.raises(ValueError, match=named):
        hand_down_picks(sizes, **kwargs)
