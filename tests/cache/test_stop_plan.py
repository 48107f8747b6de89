"""stop_writes.stop_plan (pure): one plan over a clean stop's writes to the disk levels below RAM, the spill queue's
histories and RAM's hand-downs alike, the most recently used first (session 42). Planned apart, the queue's were
written first and RAM's picked as if the level were empty: their writes evicted the queue's, the most recently used
one among them (item B). With a warm and a cold level no plan was made: all were written oldest first through the
cascade, and the oldest written pushed down and out again (item C); now the newest fill the top level, the next
ones the level below, level by level (hand_down_picks each)."""

from __future__ import annotations

import pytest
from strata.server.cache.stop_writes import hand_down_picks, stop_plan


def plan(histories, budgets=(10,), free=(100,), taken=None):
    return stop_plan([[n] * len(budgets) for n, _ in histories], [u for _, u in histories], budgets=budgets,
                     free=free, when_full="evict", taken=taken)


def test_the_newest_queued_history_is_kept_before_older_ram_ones():
    # the queue's 6 was used last; RAM's three 2s, older: planned apart, all three were written beside it and it went
    assert plan([(6, 40.0), (2, 30.0), (2, 20.0), (2, 10.0)]) == [0, 0, 0, None]


def test_one_level_is_hand_down_picks():
    histories = [(3, 5.0), (4, 25.0), (1, 1.0), (2, 30.0), (6, 15.0), (3, 20.0)]
    picks = hand_down_picks([n for n, _ in histories], used=[u for _, u in histories], budget=10, free=100,
                            when_full="evict", taken=2)
    assert [i for i, w in enumerate(plan(histories, taken=[2])) if w == 0] == sorted(picks)


def test_the_newest_fill_the_top_level_the_next_the_one_below():
    # ten of 5 units, warm 10 and cold 20: the two newest to warm, the next four to cold, four left out (before:
    # all ten written, oldest first, four of them evicted from cold within the stop)
    histories = [(5, float(t)) for t in range(10)]
    assert plan(histories, budgets=(10, 20), free=(1000, 1000)) == [None] * 4 + [1] * 4 + [0] * 2


def test_one_too_large_for_the_top_level_goes_below():
    assert plan([(12, 9.0), (4, 8.0), (4, 7.0)], budgets=(10, 20), free=(1000, 1000)) == [1, 0, 0]


def test_the_levels_above_take_a_shared_volumes_free_space():
    # 15 units free: warm's 10 leave 5 for cold's 5 and 5 picked: not certain, no plan
    assert plan([(5, 4.0), (5, 3.0), (5, 2.0), (5, 1.0)], budgets=(10, 10), free=(15, 15)) is None
    assert plan([(5, 4.0), (5, 3.0), (5, 2.0), (5, 1.0)], budgets=(10, 10), free=(20, 20)) == [0, 0, 1, 1]


def test_levels_on_two_volumes_count_only_their_own_picks():
    # warm and cold on two disks with 15 units free each: warm's 10 are not counted off cold's (that made no plan,
    # and the stop wrote all, oldest first, evicting some); on one volume as before
    four = [(5, 4.0), (5, 3.0), (5, 2.0), (5, 1.0)]
    assert stop_plan([[5, 5]] * 4, [u for _, u in four], budgets=[10, 10], free=[15, 15], when_full="evict",
                     volumes=[0, 1]) == [0, 0, 1, 1]
    assert stop_plan([[5, 5]] * 4, [u for _, u in four], budgets=[10, 10], free=[15, 15], when_full="evict",
                     volumes=[0, 0]) is None
    with pytest.raises(ValueError, match="volumes must give one value per level"):
        stop_plan([[5, 5]], [1.0], budgets=[10, 10], free=[15, 15], when_full="evict", volumes=[0])


@pytest.mark.parametrize("budgets, free, when_full", [((0,), (100,), "evict"), ((10,), (None,), "evict"),
                                                      ((10,), (100,), "reject"), ((10,), (3,), "evict"),
                                                      ((10, 10), (100, None), "evict")])
def test_none_where_not_certain(budgets, free, when_full):
    assert stop_plan([[6] * len(budgets), [5] * len(budgets)], [1.0, 2.0], budgets=budgets, free=free,
                     when_full=when_full) is None


@pytest.mark.parametrize("sizes, used, taken, why", [
    ([[6, 6]], [1.0], None, "one size per level"), ([6], [1.0], None, "one size per level"),
    ([[6]], [], None, "one last use per history"), ([[-1]], [1.0], None, "whole numbers"),
    ([[1]], [float("nan")], None, "not NaN"), ([[1]], [1.0], [0, 0], "taken must give one value per level"),
    ([[1]], [1.0], [-3], "whole numbers")])
def test_bad_input_is_named(sizes, used, taken, why):
    with pytest.raises(ValueError, match=why):
        stop_plan(sizes, used, budgets=[10], free=[100], when_full="evict", taken=taken)
