"""stop_writes.hand_down_picks (pure): which of RAM's histories a stop hands down to the one disk level below it
keeps whole, the most valuable (newest) first; None where the outcome is not certain (all are written then)."""

from __future__ import annotations

import pytest
from strata.server.cache.stop_writes import hand_down_picks

MIB = 1 << 20


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
    assert hand_down_picks(sizes, budget=budget, free=free, when_full=when_full, taken=taken) == picks


def test_the_picks_fit_together_and_none_left_out_would_fit_beside_them():
    sizes = [MIB * s for s in (3, 7, 2, 5, 1, 4, 6, 2)]
    budget = 12 * MIB
    picks = hand_down_picks(sizes, budget=budget, free=1 << 40, when_full="evict")
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
])
def test_bad_input_is_named(kwargs, named):
    sizes = kwargs.pop("sizes")
    with pytest.raises(ValueError, match=named):
        hand_down_picks(sizes, **kwargs)
