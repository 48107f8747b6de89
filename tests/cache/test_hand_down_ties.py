"""stop_writes.hand_down_picks among histories of one last use (every context no request has used is -inf; the
feed's outlook gives the contexts in slot order, the stop its RAM entries by key): the smaller first, so how many
are kept, and the `keeping N` lines and the feed's `stop.conversations` with it, does not hang on the order given."""

from __future__ import annotations

import itertools

import pytest
from strata.server.cache.stop_writes import hand_down_picks

NEVER = float("-inf")


@pytest.mark.parametrize("order", list(itertools.permutations([6, 5, 5])))
def test_equal_last_uses_keep_as_many_in_any_order(order):
    picks = hand_down_picks(list(order), used=[NEVER] * 3, budget=10, free=100, when_full="evict")
    assert sorted(order[i] for i in picks) == [5, 5], (order, picks)   # before: (6, 5, 5) kept the 6 alone


def test_a_more_recent_one_still_goes_first_whatever_its_size():
    assert hand_down_picks([6, 5, 5], used=[3.0, NEVER, NEVER], budget=10, free=100, when_full="evict") == [0]
