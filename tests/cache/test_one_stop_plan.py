"""stop_writes.one_stop_plan (pure): one plan over a clean stop's two writes to the one disk level below RAM, the
spill queue's histories and RAM's hand-downs, the most recently used first over both (session 42, item B). Planned
apart, the queue's were written first and RAM's picked as if the level were empty: their writes evicted the
queue's, the most recently used one among them."""

from __future__ import annotations

import pytest
from strata.server.cache.stop_writes import hand_down_picks, one_stop_plan


def plan(queued, ram, budget=10, free=100):
    return one_stop_plan(queued, ram, budget=budget, free=free, when_full="evict")


def test_the_newest_queued_history_is_kept_before_older_ram_ones():
    # the queue's 6 was used last; RAM's three 2s, older: planned apart, all three were written beside it and it went
    assert plan([(6, 40.0)], [(2, 30.0), (2, 20.0), (2, 10.0)]) == ([0], [0, 1])


def test_an_older_queued_history_is_left_out_for_newer_ram_ones():
    assert plan([(6, 10.0)], [(5, 30.0), (5, 20.0)]) == ([], [0, 1])


def test_it_is_hand_down_picks_over_both():
    queued, ram = [(3, 5.0), (4, 25.0), (1, 1.0)], [(2, 30.0), (6, 15.0), (3, 20.0)]
    both = hand_down_picks([n for n, _ in queued + ram], used=[u for _, u in queued + ram], budget=10, free=100,
                           when_full="evict")
    q, r = plan(queued, ram)
    assert sorted(q + [len(queued) + i for i in r]) == sorted(both)
    assert sum(queued[i][0] for i in q) + sum(ram[i][0] for i in r) <= 10


@pytest.mark.parametrize("budget, free, when_full", [(0, 100, "evict"), (10, None, "evict"), (10, 100, "reject"),
                                                     (10, 3, "evict")])
def test_none_where_not_certain(budget, free, when_full):
    assert one_stop_plan([(6, 1.0)], [(5, 2.0)], budget=budget, free=free, when_full=when_full) is None


@pytest.mark.parametrize("queued, ram, why", [([6], [], "queued must be"), ([], [(1, 2, 3)], "ram must be"),
                                              ([(-1, 1.0)], [], "whole numbers"),
                                              ([(1, float("nan"))], [], "not NaN")])
def test_bad_input_is_named(queued, ram, why):
    with pytest.raises(ValueError, match=why):
        plan(queued, ram)
