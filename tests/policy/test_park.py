"""plan_park (seed 000): parking the solo path's conversation, and the revision's measured cases."""

from __future__ import annotations

from strata.server.slot_policy import PolicyConfig, plan_park, value

from .factories import DEFAULT, main, slot

NOW = 1000.0
DECAY_150 = PolicyConfig(idle_value_zero_s=150)  # the seed's checks: decay shows within minutes


def test_parks_into_a_blank_slot_and_keeps_the_last_use():
    # seed: A (11.9K) parked 27.0 s after its turn ended: the slot's age is 27.0 s, not 0
    d = plan_park(main(11_900, age=27.0), [slot(1, 5_000, age=1), slot(2)], NOW, DECAY_150)
    assert (d.slot, d.reason, d.park_skip) == (2, "blank", None)
    assert d.last_use == NOW - 27.0


def test_main_past_the_zero_age_is_not_parked_even_into_a_blank_slot():
    # seed: idle 160 s with the zero age at 150 s -> park_skip main_low_value, no slot taken
    d = plan_park(main(12_900, age=160), [slot(1), slot(2)], NOW, DECAY_150)
    assert (d.slot, d.park_skip) == (None, "main_low_value")


def test_main_below_the_keep_score_is_not_parked():
    m = main(1_500, age=10)   # expired, value ~0.004
    assert value(1_500, 10, DEFAULT) < 0.01
    assert plan_park(m, [slot(1)], NOW, DEFAULT).park_skip == "main_low_value"
    assert plan_park(m, [slot(1)], NOW, PolicyConfig(expired_keep_score=0.001, park_min_value=0.001)).slot == 1


def test_keep_score_is_checked_even_when_park_min_value_is_lower():
    m = main(20_000, age=100)  # value ~0.109
    assert plan_park(m, [slot(1)], NOW, PolicyConfig(expired_keep_score=0.2, park_min_value=0.0)).park_skip == \
        "main_low_value"
    assert plan_park(m, [slot(1)], NOW, PolicyConfig(expired_keep_score=0.05, park_min_value=0.0)).slot == 1


def test_park_min_value_is_its_own_threshold():
    m = main(20_000, age=100)  # value ~0.109
    assert 0.1 < value(20_000, 100, DEFAULT) < 0.12
    cfg = PolicyConfig(expired_keep_score=0.0, park_min_value=0.12)
    assert plan_park(m, [slot(1)], NOW, cfg).park_skip == "main_low_value"
    assert plan_park(m, [slot(1)], NOW, PolicyConfig(expired_keep_score=0.0, park_min_value=0.05)).slot == 1


def test_a_slot_holding_the_kept_share_already_keeps_it():
    m = main(40_000, age=5)
    kept = [slot(1, 39_300, common=39_200, age=50), slot(2)]   # 98% of 40,000 = 39,200
    assert plan_park(m, kept, NOW, DEFAULT).park_skip == "kept_share"
    short = [slot(1, 39_100, common=39_100, age=50), slot(2)]  # 97.75%: its own older copy
    d = plan_park(m, short, NOW, DEFAULT)
    assert (d.slot, d.reason, d.reused) == (1, "own_copy", 39_100)
    assert plan_park(m, short, NOW, PolicyConfig(park_kept_share=0.95)).park_skip == "kept_share"


def test_own_older_copy_first_even_when_protected_and_other_slots_are_blank():
    m = main(30_000, age=2)
    d = plan_park(m, [slot(1), slot(2, 20_000, common=20_000, age=1)], NOW, DEFAULT)
    assert (d.slot, d.reason) == (2, "own_copy")


def test_never_a_protected_slot_nowhere_suitable_no_park():
    m = main(60_000, age=80)
    slots = [slot(1, 8_000, age=2), slot(2, 30_000, age=10), slot(3, 5_000, age=100, busy=True)]
    d = plan_park(m, slots, NOW, DEFAULT)
    assert (d.slot, d.park_skip) == (None, "no_target")


def test_every_slot_worth_keeping_and_main_worth_less_than_twice_as_much_no_park():
    # seed: six slots of 10,062 tokens (value 0.056), main 12.9K: no park
    slots = [slot(i, 10_062, age=13.05 + i * 0.01) for i in range(1, 7)]
    m = main(12_900, age=20)
    assert value(12_900, 20, DECAY_150) < 2 * value(10_062, 13.06, DECAY_150)
    d = plan_park(m, slots, NOW, DECAY_150)
    assert (d.slot, d.park_skip) == (None, "no_target")


def test_main_worth_more_than_twice_as_much_parks_into_the_lowest_value_the_oldest():
    # seed: main 42.1K (0.202): parked into the slot with the lowest value (the oldest)
    slots = [slot(i, 10_062, age=a) for i, a in zip(range(1, 7), (13.5, 14, 15, 16, 20, 17), strict=True)]
    m = main(42_100, age=56.3)
    assert value(42_100, 56.3, DECAY_150) > 2 * value(10_062, 13.5, DECAY_150)
    d = plan_park(m, slots, NOW, DECAY_150)
    assert (d.slot, d.reason, d.lost_tokens) == (5, "expired_keep", 10_062)


def test_park_value_ratio_zero_never_takes_a_history_worth_keeping():
    slots = [slot(1, 10_062, age=14)]
    m = main(42_100, age=56.3)
    assert plan_park(m, slots, NOW, PolicyConfig(idle_value_zero_s=150, park_value_ratio=0)).park_skip == "no_target"
    assert plan_park(m, slots, NOW, PolicyConfig(idle_value_zero_s=150, park_value_ratio=1)).slot == 1


def test_park_prefers_a_history_not_worth_keeping():
    slots = [slot(1, 10_062, age=14), slot(2, 1_500, age=20)]
    d = plan_park(main(42_100, age=56.3), slots, NOW, DECAY_150)
    assert (d.slot, d.reason) == (2, "expired")


def test_empty_main_has_nothing_to_park():
    assert plan_park(main(0, age=1), [slot(1)], NOW, DEFAULT).park_skip == "main_empty"


def test_a_superseded_copy_of_the_conversation_takes_the_park_before_an_empty_slot():
    # a side request displaces main after each turn: the turn before copied the conversation back from slot 1
    # into main, which left slot 1 a superseded (blank) copy of its first 2,096 tokens. The park went to the
    # empty slot 2 (and every slot ended up holding a stale copy of one conversation, as a new-user trial's
    # /v1/slots showed); its older copy takes it, the empty slots stay empty
    m = main(3_065, age=1)
    slots = [slot(1, 2_096, common=2_096, age=2, blank=True), slot(2), slot(3)]
    d = plan_park(m, slots, NOW, DEFAULT)
    assert (d.slot, d.reason, d.reused, d.lost_tokens) == (1, "own_copy", 2_096, 0)
    # a blank slot holding anything else than a prefix of main is no copy of it: the reclaim order as before
    other = [slot(1, 2_096, common=40, age=2, blank=True), slot(2)]
    assert plan_park(m, other, NOW, DEFAULT).reason == "blank"
