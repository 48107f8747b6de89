"""pick_slot for plain --batch (seed 001): one test per rule, and the seed's measured case."""

from __future__ import annotations

from strata.server.slot_policy import PolicyConfig, pick_slot

from .factories import AFFINITY, DEFAULT, EXPIRE_600, PLAIN_LRU, req, slot

NOW = 1000.0


def test_own_prefix_first_even_when_other_slots_are_empty_or_older():
    slots = [slot(1), slot(2, 5_000, age=900), slot(3, 20_000, common=20_000, age=1)]
    for cfg in (PLAIN_LRU, EXPIRE_600, DEFAULT):
        d = pick_slot(slots, req(20_050), NOW, cfg)
        assert (d.slot, d.reason, d.reused, d.source_slot) == (3, "own_prefix", 20_000, None)


def test_a_near_match_is_as_good_as_the_best_and_a_far_one_is_copied_from():
    # slot 2 (busy) holds 30,000 of the prompt; slot 3 (idle, own) 29,500: within 2% -> no copy
    near = [slot(1), slot(2, 30_000, common=30_000, busy=True), slot(3, 29_500, common=29_500)]
    d = pick_slot(near, req(31_000), NOW, EXPIRE_600)
    assert (d.slot, d.source_slot, d.reused) == (3, None, 29_500)
    # the only idle slot holding it has 10,000: far from the best -> run there, copy from slot 2
    far = [slot(1, 9_000, age=50), slot(2, 30_000, common=30_000, busy=True), slot(3, 10_000, common=10_000)]
    d = pick_slot(far, req(31_000), NOW, EXPIRE_600)
    assert (d.slot, d.source_slot, d.reused) == (3, 2, 30_000)


def test_near_match_tolerance_uses_the_prompt_rate_and_the_4096_cap():
    # own slot 3,000 short of the best: not near at 2% of 30K (600), near at one second of 3,000 tok/s
    slots = [slot(1, 30_000, common=30_000, busy=True), slot(2, 30_000, common=27_000)]
    assert pick_slot(slots, req(31_000, rate=0), NOW, EXPIRE_600).source_slot == 1
    assert pick_slot(slots, req(31_000, rate=3_000), NOW, EXPIRE_600).source_slot is None
    slots = [slot(1, 100_000, common=100_000, busy=True), slot(2, 100_000, common=95_000)]
    assert pick_slot(slots, req(101_000, rate=10_000), NOW, EXPIRE_600).source_slot == 1  # cap 4096


def test_then_an_empty_slot():
    slots = [slot(1, 40_000, age=5_000), slot(2), slot(3, 300, age=9_000)]
    for cfg in (PLAIN_LRU, EXPIRE_600):
        assert pick_slot(slots, req(1_000), NOW, cfg).slot == 2


def test_expire_takes_the_least_recently_used_of_the_expired():
    slots = [slot(1, 300, age=10), slot(2, 50_000, age=700), slot(3, 80_000, age=900), slot(4, 2_000, age=599)]
    d = pick_slot(slots, req(1_000), NOW, EXPIRE_600)
    assert (d.slot, d.reason) == (3, "expired_lru")


def test_expire_at_exactly_the_limit_counts_as_expired():
    slots = [slot(1, 300, age=10), slot(2, 50_000, age=600)]
    assert pick_slot(slots, req(1_000), NOW, EXPIRE_600).slot == 2


def test_expire_else_the_shortest_history():
    slots = [slot(1, 40_000, age=500), slot(2, 1_777, age=20), slot(3, 9_000, age=550)]
    d = pick_slot(slots, req(100), NOW, EXPIRE_600)
    assert (d.slot, d.reason, d.lost_tokens) == (2, "shortest", 1_777)


def test_expire_off_takes_the_least_recently_used():
    slots = [slot(1, 40_000, age=500), slot(2, 1_777, age=20), slot(3, 9_000, age=450)]
    d = pick_slot(slots, req(100), NOW, PLAIN_LRU)
    assert (d.slot, d.reason) == (1, "lru")


def test_busy_slots_are_never_chosen_and_all_busy_says_so():
    slots = [slot(1, 40_000, age=5000, busy=True), slot(2, 9_000, age=10)]
    assert pick_slot(slots, req(100), NOW, PLAIN_LRU).slot == 2
    d = pick_slot([slot(1, 5, busy=True)], req(100), NOW, PLAIN_LRU)
    assert (d.slot, d.reason) == (None, "all_busy")


def test_seed_001_measured_case_side_request_takes_the_short_history():
    # --batch 3, a third stream decodes all along; A (40,251 held) and B (1,777) finished; side request
    a, b = slot(1, 40_251, age=3), slot(2, 1_777, age=2)
    stream = slot(3, 5_000, busy=True)
    side = req(60)
    assert pick_slot([a, b, stream], side, NOW, PLAIN_LRU).slot == 1        # main: A's slot
    assert pick_slot([a, b, stream], side, NOW, EXPIRE_600).slot == 2       # this PR: B's
    # then A's next turn (40,273 tokens) finds its slot: reuses 40,251
    a_turn = pick_slot([slot(1, 40_251, common=40_251, age=4), slot(2, 80, age=1), stream], req(40_273), NOW,
                       EXPIRE_600)
    assert (a_turn.slot, a_turn.reused) == (1, 40_251)


def test_affinity_delegates_to_place_and_expire_keeps_seed_001_for_one_group():
    # one group: affinity (default) values the 40K history; with expire set seed 001's order holds
    slots = [slot(1, 40_000, age=200), slot(2, 1_500, age=30)]
    assert pick_slot(slots, req(100), NOW, DEFAULT).reason in ("expired", "expired_keep")
    assert pick_slot(slots, req(100), NOW, DEFAULT).slot == 2
    assert pick_slot(slots, req(100), NOW, PolicyConfig(expire_s=600)).reason == "shortest"
    # two groups: place() even with expire set (the groups return before seed 001's rule)
    two = [slot(1, 40_000, age=200, n_groups=2), slot(2, 1_500, age=30, n_groups=2)]
    d = pick_slot(two, req(100), NOW, PolicyConfig(expire_s=600, cache_affinity=True), {0: 0, 1: 0})
    assert d.reason in ("expired", "expired_keep")
    assert pick_slot(two, req(100), NOW, PolicyConfig(expire_s=600, cache_affinity=False)).reason == "shortest"
    assert AFFINITY.cache_affinity


def test_a_slot_sharing_only_a_system_prompt_holds_another_conversation():
    # 512 shared tokens of a 1,110-token history: less than half of it -> not the request's own
    slots = [slot(1, 1_110, common=512, age=1), slot(2)]
    for cfg in (PLAIN_LRU, EXPIRE_600, DEFAULT):
        assert pick_slot(slots, req(700, rate=2_000), NOW, cfg).slot == 2
    assert pick_slot(slots, req(700, rate=2_000), NOW, PolicyConfig(own_min_share=0.4, cache_affinity=False)).slot == 1
