"""place() for pipelined groups (seed 000): one test per rule, and the B/C turns table."""

from __future__ import annotations

from strata.server.slot_policy import PolicyConfig, place, value

from .factories import AFFINITY, req, slot

NOW = 1000.0


def g(i, n=0, **kw):
    """Slot i of --batch 6 in 3 groups."""
    return slot(i, n, n_groups=3, **kw)


def test_continued_runs_in_its_own_slot():
    slots = [g(1), g(2, 9_000, common=9_000, age=30), g(3, 500, age=2000)]
    d = place(slots, req(9_020), NOW, AFFINITY, {0: 0, 1: 0, 2: 0})
    assert (d.slot, d.reason, d.reused) == (2, "own_prefix", 9_000)


def test_continued_moves_to_a_blank_slot_of_a_less_loaded_group_copying_its_own():
    slots = [g(1, 9_000, common=9_000, age=30), g(2, 7_900, age=30), g(3), g(4, 100, busy=True)]
    d = place(slots, req(9_020), NOW, AFFINITY, {0: 1, 1: 0, 2: 0})
    assert (d.slot, d.reason, d.source_slot, d.reused) == (3, "blank_less_loaded", 1, 9_000)
    # an equally loaded group's blank slot is no reason to move
    d = place(slots, req(9_020), NOW, AFFINITY, {0: 0, 1: 0, 2: 0})
    assert d.slot == 1


def test_continued_never_takes_a_slot_holding_another_conversation():
    # its own slot is in the busiest group; the other groups hold other conversations (expired, cheap)
    slots = [g(1, 9_000, common=9_000, age=30), g(2, 1_000, age=600), g(3, 2_000, age=900)]
    d = place(slots, req(9_020), NOW, AFFINITY, {0: 2, 1: 0, 2: 0})
    assert d.slot == 1


def test_new_conversation_takes_blank_first():
    slots = [g(1, 30_000, age=1000), g(2), g(3, 600, age=5000)]
    assert place(slots, req(500), NOW, AFFINITY, {}).slot == 2


def test_new_conversation_takes_expired_below_keep_score_before_one_worth_keeping():
    worth = g(1, 7_900, age=30)        # expired, value ~0.044
    cheap = g(2, 1_500, age=5)          # expired, value ~0.004
    assert value(7_900, 30, AFFINITY) > 0.01 > value(1_500, 5, AFFINITY)
    d = place([worth, cheap], req(500), NOW, AFFINITY, {0: 0, 1: 5})   # even from the busier group
    assert (d.slot, d.reason) == (2, "expired")


def test_then_by_group_load_then_lowest_value():
    a = g(1, 20_000, age=100)   # worth keeping, group 0
    b = g(2, 10_000, age=100)   # worth keeping, lower value, group 1
    assert value(20_000, 100, AFFINITY) > value(10_000, 100, AFFINITY) >= 0.01
    assert place([a, b], req(500), NOW, AFFINITY, {0: 0, 1: 1}).slot == 1   # group load first
    assert place([a, b], req(500), NOW, AFFINITY, {0: 0, 1: 0}).slot == 2   # equal load: lowest value


def test_a_blank_slot_first_at_an_equal_value():
    zero = g(1, 3_000, age=5000)   # value 0 (past 30 minutes)
    blank = g(2, 3_000, blank=True, age=10)   # a superseded copy
    d = place([zero, blank], req(500), NOW, AFFINITY, {})
    assert (d.slot, d.reason) == (2, "blank")


def test_a_protected_history_is_never_taken_while_an_expired_one_exists():
    fresh_small = g(1, 600, age=0.05)        # protected (0.1 s at 500 tokens; ~0.17 s at 600)
    old_big = g(2, 120_000, age=400)         # expired, valuable
    d = place([fresh_small, old_big], req(500), NOW, AFFINITY, {})
    assert d.slot == 2 and d.reason == "expired_keep"


def test_no_wait_every_history_protected_takes_the_least_loss_at_once():
    slots = [g(1, 50_000, age=10), g(2, 8_000, age=5), g(3, 30_000, age=1)]
    d = place(slots, req(500), NOW, AFFINITY, {})
    assert (d.slot, d.reason) == (2, "least_loss")
    assert d.loss == value(8_000, 5, AFFINITY)


def test_no_wait_losses_within_ten_percent_go_by_group_load():
    a = g(1, 8_000, age=5)     # loss L
    b = g(2, 8_000, age=4.6)   # loss a few % higher, less loaded group
    la, lb = value(8_000, 5, AFFINITY), value(8_000, 4.6, AFFINITY)
    assert la < lb <= la * 1.1
    assert place([a, b], req(500), NOW, AFFINITY, {0: 2, 1: 0}).slot == 2
    assert place([a, b], req(500), NOW, AFFINITY, {0: 0, 1: 0}).slot == 1
    far = g(2, 30_000, age=1)  # more than 10% dearer: the least loss wins whatever the load
    assert place([a, far], req(500), NOW, AFFINITY, {0: 2, 1: 0}).slot == 1


def test_loss_tie_share_is_a_parameter():
    a, b = g(1, 8_000, age=5), g(2, 8_000, age=4.6)
    assert place([a, b], req(500), NOW, PolicyConfig(loss_tie_share=0.0), {0: 2, 1: 0}).slot == 1


def test_a_zero_value_history_still_matches_its_conversation():
    old = g(1, 40_000, common=40_000, age=4000)   # value 0, not deleted
    assert value(40_000, 4000, AFFINITY) == 0.0
    d = place([old, g(2)], req(40_100), NOW, AFFINITY, {})
    assert (d.slot, d.reason, d.reused) == (1, "own_prefix", 40_000)


def test_an_expired_history_is_still_a_source_when_its_slot_is_busy():
    slots = [g(1, 40_000, common=40_000, age=300, busy=True), g(2), g(3, 700, age=10)]
    d = place(slots, req(40_100), NOW, AFFINITY, {0: 1})
    assert (d.slot, d.source_slot, d.reused) == (2, 1, 40_000)


# --- seed 000's measured case: --batch 6 in 3 groups, A parked, two clients generating,
# B (9K) and C (7.9K) taking turns about every 30 s (past their protection of ~11 and ~10 s)

def bc_table(side_age: float, b_common: int = 0, c_common: int = 0):
    return [
        g(1, 2_000, busy=True),                       # client 1 generating (group 0)
        g(2, 2_000, busy=True),                       # client 2 generating (group 1)
        g(3, 37_359, age=20),                         # A parked, protected (~51 s)
        g(4, 9_000, common=b_common, age=30),         # B, expired, worth keeping
        g(5, 7_900, common=c_common, age=31),         # C, expired, worth keeping
        g(6, 1_500, age=side_age),                    # the last side request's history
    ]


LOAD = {0: 1, 1: 1, 2: 0}


def test_bc_turn_reuses_all_but_the_new_tokens():
    d = place(bc_table(1.0, b_common=9_000), req(9_020), NOW, AFFINITY, LOAD)
    assert (d.slot, d.reused) == (4, 9_000)
    d = place(bc_table(1.0, c_common=7_900), req(7_920), NOW, AFFINITY, LOAD)
    assert (d.slot, d.reused) == (5, 7_900)


def test_bc_side_request_takes_the_expired_side_history_and_keeps_b_and_c():
    d = place(bc_table(side_age=5.0), req(1_500), NOW, AFFINITY, LOAD)
    assert (d.slot, d.reason) == (6, "expired")


def test_bc_side_request_next_to_a_protected_side_history_takes_c_no_wait():
    # the case the seed accepts: the other side history is still protected (1 s < ~1.4 s), so the
    # new side request takes C's expired slot at once instead of waiting
    d = place(bc_table(side_age=1.0), req(1_500), NOW, AFFINITY, LOAD)
    assert d.slot in (4, 5) and d.reason == "expired_keep"
    assert d.slot == 5  # C: the lower value of the two
