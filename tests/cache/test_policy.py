"""Pure cache policy (seed 002): admission under two floors, placement, auto target, demotion, ranking."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strata.server.cache.policy import (
    Candidate,
    LevelEntry,
    decide_admission,
    place_disk_io,
    plan_demotions,
    rank_candidates,
    resolve_auto_target,
)

# (available, snapshot, target, ram_on, disk_on) -> (destination, floor)
ADMISSION_TABLE = [
    (10000, 2500, "ram", True, True, "ram", "parking"),      # 10000 >= 2500 + 2560
    (5060, 2500, "ram", True, True, "ram", "parking"),       # exactly snapshot + floor
    (5059, 2500, "ram", True, True, "disk", "transient"),    # big floor refuses: spill, not discard
    (3012, 2500, "ram", True, True, "disk", "transient"),    # exactly snapshot + 512
    (3011, 2500, "ram", True, True, "discard", "none"),      # neither holds
    (5059, 2500, "ram", True, False, "discard", "none"),     # no disk level: the old discard
    (10000, 2500, "disk", True, True, "disk", "parking"),    # park=disk: disk even with RAM to spare
    (3012, 2500, "disk", True, True, "disk", "transient"),
    (3011, 2500, "disk", True, True, "discard", "none"),
    (10000, 2500, "disk", True, False, "ram", "parking"),    # disk target without disk: stays in RAM
    (10000, 2500, "ram", False, True, "disk", "parking"),    # RAM level off: straight to disk
    (904, 2500, "ram", True, True, "discard", "none"),       # the seed's minimum free RAM
]


@pytest.mark.parametrize("available,snapshot,target,ram_on,disk_on,dest,floor", ADMISSION_TABLE)
def test_admission_table(available, snapshot, target, ram_on, disk_on, dest, floor):
    a = decide_admission(available, snapshot, 2560, 512, target, ram_on=ram_on, disk_on=disk_on)
    assert (a.destination, a.floor) == (dest, floor), a.reason
    assert a.reason


def test_seed_measured_case_average_free_ram_spills_instead_of_discarding():
    # Seed 002: host free RAM averaged 4,070 MiB, a snapshot ~2.5 GB: the parking floor refused 28
    # parks; with the transient floor each of them spills to disk.
    a = decide_admission(4070, 2500, 2560, 512, "ram")
    assert a.destination == "disk" and a.floor == "transient"
    assert "512" in a.reason


def test_zero_transient_floor_requires_only_the_snapshot():
    assert decide_admission(2500, 2500, 2560, 0, "ram").destination == "disk"
    assert decide_admission(2499, 2500, 2560, 0, "ram").destination == "discard"


def test_admission_rejects_bad_input():
    with pytest.raises(ValueError, match="auto"):
        decide_admission(1, 1, 1, 1, "auto")
    with pytest.raises(ValueError, match="available_mib"):
        decide_admission(-1, 1, 1, 1, "ram")


@pytest.mark.parametrize("source", ["disk_hit", "segment_hit", "system_prompt_hit", "session_restore", "session_save"])
def test_one_placement_for_every_disk_read_and_save(source):
    assert place_disk_io(10000, 2500, 2560, 512, source).floor == "parking"
    t = place_disk_io(4070, 2500, 2560, 512, source)
    assert (t.destination, t.floor) == ("disk", "transient") and source in t.reason
    assert "plus 512 MiB" in t.reason
    assert place_disk_io(3000, 2500, 2560, 512, source).destination == "discard"


def test_placement_rejects_unknown_source():
    with pytest.raises(ValueError, match="source"):
        place_disk_io(1, 1, 1, 1, "nowhere")


def test_auto_target_both_ways():
    # 4 slots x 2500 + 2560 = 12560 MiB
    assert resolve_auto_target(12560, 2500, 4, 2560).target == "ram"
    d = resolve_auto_target(12559, 2500, 4, 2560)
    assert d.target == "disk" and d.reason.startswith("park target auto -> disk")
    assert resolve_auto_target(0, 2500, 4, 2560, disk_on=False).target == "ram"
    assert resolve_auto_target(5060, 2500, 0, 2560).target == "ram"  # solo path counts as one


def E(key, size, t):
    return LevelEntry(key, size, t)


def test_demotions_oldest_first_until_under_budget():
    entries = [E("c", 30, 3.0), E("a", 30, 1.0), E("b", 30, 2.0), E("d", 30, 4.0)]
    plan = plan_demotions(entries, 70, 0, now=10.0, is_last=False)
    assert [(d.key, d.action, d.cause) for d in plan] == [("a", "degrade", "budget"), ("b", "degrade", "budget")]


def test_only_the_last_level_deletes():
    plan = plan_demotions([E("a", 30, 1.0), E("b", 30, 2.0)], 40, 0, now=10.0, is_last=True)
    assert [(d.key, d.action) for d in plan] == [("a", "delete")]


def test_age_first_then_budget_and_incoming():
    entries = [E("old", 10, 0.0), E("mid", 10, 50.0), E("new", 10, 95.0)]
    plan = plan_demotions(entries, 20, 60, now=100.0, is_last=False, incoming_bytes=10)
    assert [(d.key, d.cause) for d in plan] == [("old", "age"), ("mid", "budget")]
    assert plan_demotions(entries, 1000, 0, now=1e9, is_last=True) == []  # 0 = no age limit


def test_ties_in_age_break_on_key():
    plan = plan_demotions([E("b", 10, 1.0), E("a", 10, 1.0)], 10, 0, now=2.0, is_last=False)
    assert [d.key for d in plan] == ["a"]


@pytest.mark.parametrize("held, is_last, budget, incoming, max_age, want", [
    # the oldest is held (a hit about to be restored): the next oldest leaves instead
    ({"a"}, True, 90, 30, 0, [("b", "delete", "budget")]),
    ({"a"}, False, 90, 30, 0, [("b", "degrade", "budget")]),
    ({"a"}, True, 60, 30, 0, [("b", "delete", "budget"), ("c", "delete", "budget")]),
    # held ones leave last, oldest first, only when the others cannot make room (the newcomer is never refused);
    # the last level does not delete one: it leaves as its hold ends, once its restore has read it
    ({"a", "b"}, True, 60, 30, 0, [("c", "delete", "budget"), ("a", "after_hold", "budget")]),
    ({"b"}, True, 30, 30, 0, [("a", "delete", "budget"), ("c", "delete", "budget"), ("b", "after_hold", "budget")]),
    ({"a", "b"}, False, 60, 30, 0, [("c", "degrade", "budget"), ("a", "degrade", "budget")]),
    # an aged held entry stays too
    ({"a"}, True, 1000, 0, 5, [("b", "delete", "age"), ("c", "delete", "age")]),
    # nothing held: the oldest first, as before
    (set(), True, 90, 30, 0, [("a", "delete", "budget")]),
])
def test_held_entries_leave_last(held, is_last, budget, incoming, max_age, want):
    entries = [E("a", 30, 1.0), E("b", 30, 2.0), E("c", 30, 3.0)]
    plan = plan_demotions(entries, budget, max_age, now=10.0, is_last=is_last, incoming_bytes=incoming, held=held)
    assert [(d.key, d.action, d.cause) for d in plan] == want


@pytest.mark.parametrize("stuck, is_last, budget, incoming, max_age, want", [
    # a stuck entry (a folder where its file would go on the next level) is passed by: the next oldest moves
    ({"a"}, False, 90, 30, 0, [("b", "degrade", "budget")]),
    ({"a"}, False, 60, 30, 0, [("b", "degrade", "budget"), ("c", "degrade", "budget")]),
    # never for its age either: it stays where it is
    ({"a"}, False, 1000, 0, 5, [("b", "degrade", "age"), ("c", "degrade", "age")]),
    # its bytes still count: only stuck ones left, the level stays short (the mechanism refuses the newcomer)
    ({"a", "b", "c"}, False, 60, 30, 0, []),
    # the last level deletes: nothing is stuck there
    ({"a"}, True, 90, 30, 0, [("a", "delete", "budget")]),
])
def test_stuck_entries_are_passed_by(stuck, is_last, budget, incoming, max_age, want):
    entries = [E("a", 30, 1.0), E("b", 30, 2.0), E("c", 30, 3.0)]
    plan = plan_demotions(entries, budget, max_age, now=10.0, is_last=is_last, incoming_bytes=incoming, stuck=stuck)
    assert [(d.key, d.action, d.cause) for d in plan] == want


@settings(deadline=None)     # hypothesis' 200 ms default: a loaded CI's pause read as 'Flaky'
@given(st.lists(st.tuples(st.integers(1, 100), st.floats(0, 100)), max_size=20), st.integers(0, 1000))
def test_demotion_plan_leaves_the_level_within_budget(items, budget):
    entries = [E(f"k{i}", s, t) for i, (s, t) in enumerate(items)]
    plan = plan_demotions(entries, budget, 0, now=200.0, is_last=False)
    left = sum(e.n_bytes for e in entries if e.key not in {d.key for d in plan})
    assert left <= budget
    times = [next(e.sealed_at for e in entries if e.key == d.key) for d in plan]
    assert times == sorted(times)  # oldest first


def test_rank_longest_prefix_then_fastest_level():
    c = rank_candidates([Candidate("cold", "x", 100), Candidate("ram", "y", 90), Candidate("warm", "z", 100)])
    assert c.candidate == Candidate("warm", "z", 100)
    assert rank_candidates([Candidate("cold", "x", 100), Candidate("ram", "y", 101)]).candidate.level == "ram"
    assert rank_candidates([]).candidate is None
