"""The learned policy (server/slot_returns.py): buckets, the counts, each estimate on hand-computed
cases, the victim it chooses, where seed 000's rules still decide, and its settings."""

from __future__ import annotations

import math

import pytest
from strata.server import slot_returns as sr
from strata.server.slot_policy import LEARN_ENV_NAMES, LearnConfig, PolicyConfig, SlotView, place

from tests.policy.factories import req, slot

LEARNED = PolicyConfig(learn=LearnConfig(enabled=True))


def stats_of(histories=(), returns=()) -> sr.ReturnStats:
    """histories: (turn, n_tokens) made; returns: (turn, n_tokens, gap_s) first continuations."""
    st = sr.ReturnStats()
    for turn, n in histories:
        st = sr.note_history(st, turn, n)
    for turn, n, gap in returns:
        st = sr.note_return(st, turn, n, gap)
    return st


# ---------------------------------------------------------------------------------------------
# Buckets and counts
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("turn", "bucket"), [(0, 0), (1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4),
                                              (16, 4), (17, 5), (400, 5)])
def test_turn_buckets(turn, bucket):
    assert sr.turn_bucket(turn) == bucket


@pytest.mark.parametrize(("n", "bucket"), [(0, 0), (1023, 0), (1024, 1), (2047, 1), (2048, 2), (4095, 2),
                                           (4096, 3), (16_384, 4), (65_536, 5), (131_072, 6), (262_144, 6)])
def test_length_buckets_keep_1k_2k_and_2k_4k_apart(n, bucket):
    assert sr.length_bucket(n) == bucket


@pytest.mark.parametrize(("gap", "g"), [(0.0, 0), (0.99, 0), (1.0, 1), (3.9, 2), (10.0, 4), (8191.0, 13),
                                        (8192.0, 14), (1e9, 14)])
def test_gap_bins_double(gap, g):
    assert sr.gap_bin(gap) == g


def test_a_history_and_its_return_count_in_three_rows():
    st = stats_of([(3, 5000)], [(3, 5000, 10.0)])
    fine, coarse, top = sr.rows_of(3, 5000)
    assert (fine, coarse, top) == (2 * sr.N_LEN + 3, sr.N_FINE + 3, sr.ROW_ALL)
    for r in range(sr.N_ROWS):
        assert st.made[r] == (1 if r in (fine, coarse, top) else 0)
        assert st.returned[r][4] == (1 if r in (fine, coarse, top) else 0)
        assert sum(st.returned[r]) == st.returned[r][4]
    assert st.histories == 1
    assert sr.ReturnStats().histories == 0  # nothing seen: a fresh owner starts from zero


# ---------------------------------------------------------------------------------------------
# Estimates, by hand
# ---------------------------------------------------------------------------------------------

def test_return_shares_blend_each_level_towards_the_coarser_one():
    # 4 first turns of 500 tokens, one continued after 10 s (bin 4); 4 of 5,000 tokens, none continued.
    st = stats_of([(1, 500)] * 4 + [(1, 5000)] * 4, [(1, 500, 10.0)])
    q = sr.return_shares(st, 1, 500, prior_weight=4)
    # all: 1/8 = 0.125; length: (1 + 4 x 0.125) / (4 + 4) = 0.1875; turn x length: (1 + 4 x 0.1875) / 8
    assert q[4] == pytest.approx(0.21875)
    assert sum(q) == pytest.approx(0.21875)
    assert sr.return_shares(st, 1, 500, prior_weight=0)[4] == pytest.approx(0.25)  # own counts only
    assert sr.return_shares(st, 1, 5000, prior_weight=0)[4] == 0.0
    # an unseen bucket leans wholly on the coarser levels
    assert sr.return_shares(st, 9, 100_000, prior_weight=4)[4] == pytest.approx(0.125)
    assert sr.return_shares(sr.ReturnStats(), 1, 500, prior_weight=4) == [0.0] * sr.N_GAP_BINS


def test_cumulative_is_linear_within_a_bin_and_whole_in_the_open_last_one():
    q = [0.0] * sr.N_GAP_BINS
    q[4], q[14] = 0.5, 0.2  # [8, 16) and [8192, inf)
    assert sr.cumulative(q, 0) == 0.0
    assert sr.cumulative(q, 8) == 0.0
    assert sr.cumulative(q, 12) == pytest.approx(0.25)
    assert sr.cumulative(q, 16) == pytest.approx(0.5)
    assert sr.cumulative(q, 9000) == pytest.approx(0.7)


def test_expected_wait_conditions_on_the_idle_age():
    q = [0.0] * sr.N_GAP_BINS
    q[4] = 0.5  # half the histories come back 8-16 s after their last use
    assert sr.expected_wait(q, 0.0) == pytest.approx((0.5, 12.0))
    # idle 12 s: a quarter came back already; the rest of the bin (0.25) lies in 12-16 s, middle 14
    p, wait = sr.expected_wait(q, 12.0)
    assert (p, wait) == (pytest.approx(0.25 / 0.75), pytest.approx(2.0))
    assert sr.expected_wait(q, 20.0) == (0.0, math.inf)  # past every observed gap: never comes back
    q2 = [0.0] * sr.N_GAP_BINS
    q2[14] = 0.1  # the open last bin counts at twice its start
    assert sr.expected_wait(q2, 0.0) == (pytest.approx(0.1), pytest.approx(12288.0))


def test_a_history_idle_past_the_open_last_bin_is_not_judged_about_to_return():
    """Histories continued after 8,192 s or more put mass in the open last bin, counted at twice its start
    (16,384 s). A history idle longer than that had the middle of [age, 16384] as its return: a wait that
    fell to 0 at 16,384 s and then went negative (clipped to MIN_WAIT_S), so the longer a slot sat idle the
    costlier giving it up looked (every token a second) and the learned policy kept the stalest history
    over fresher ones. Within the open bin the rest of the wait is measured from the age (twice the age)."""
    q = [0.0] * sr.N_GAP_BINS
    q[14] = 0.1
    ages = [8192.0, 12000.0, 16000.0, 16384.0, 20000.0, 100_000.0]
    waits = [sr.expected_wait(q, a)[1] for a in ages]
    assert all(w > sr.MIN_WAIT_S for w in waits), waits
    assert waits == sorted(waits), waits              # idle longer: not expected back sooner
    assert sr.expected_wait(q, 8192.0) == (pytest.approx(0.1 / 0.9), pytest.approx(4096.0))   # as before at the start
    lcfg = LearnConfig(enabled=True, prior_weight=0)
    st = stats_of([(2, 3000)] * 10, [(2, 3000, 9000.0)])   # one of ten continued after 2.5 hours
    rates = [sr.expected_reread_rate(slot(1, 3000, age=a), 1000.0, st, lcfg) for a in ages]
    assert rates == sorted(rates, reverse=True), rates  # idle longer: never costlier to give up


def test_expected_reread_rate_is_chance_times_unshared_tokens_over_the_wait():
    lcfg = LearnConfig(enabled=True, prior_weight=0)
    st = stats_of([(2, 3000)] * 2, [(2, 3000, 10.0)])  # one of two continued after 10 s
    s = slot(1, 3000, common=1000, age=0.0)
    assert sr.expected_reread_rate(s, 1000.0, st, lcfg) == pytest.approx(0.5 * 2000 / 12.0)
    s_turn = SlotView(slot=1, n_tokens=3000, common=1000, last_use=1000.0, turn=2)
    assert sr.expected_reread_rate(s_turn, 1000.0, st, lcfg) == pytest.approx(0.5 * 2000 / 12.0)
    assert sr.expected_reread_rate(slot(2, 0), 1000.0, st, lcfg) == 0.0  # blank
    fast = stats_of([(1, 50_000)], [(1, 50_000, 0.1)])  # expected wait under a second counts as one
    assert sr.expected_reread_rate(slot(1, 50_000), 1000.0, fast, lcfg) == pytest.approx(50_000 / sr.MIN_WAIT_S)


# ---------------------------------------------------------------------------------------------
# The decision
# ---------------------------------------------------------------------------------------------

# 60 first turns of 40K tokens never continued; 60 third turns of 3K continued after 10 s.
TAUGHT = stats_of([(1, 40_000)] * 60 + [(3, 3000)] * 60, [(3, 3000, 10.0)] * 60)


def view(i, n, age, turn, **kw):
    return SlotView(slot=i, n_tokens=n, last_use=1000.0 - age, turn=turn, **kw)


def test_gives_up_the_history_that_is_not_coming_back_not_the_shortest():
    slots = [view(1, 40_000, 200.0, 1), view(2, 3000, 5.0, 3)]
    d = sr.place_learned(slots, req(500), 1000.0, LEARNED, TAUGHT, {})
    assert (d.slot, d.reason, d.lost_tokens) == (1, "learned", 40_000)
    seed = place(slots, req(500), 1000.0, PolicyConfig(), {})  # seed 000: the lower value, the 3K one
    assert (seed.slot, seed.reason) == (2, "expired_keep")


def test_before_min_histories_seed_000_decides():
    few = stats_of([(1, 40_000)] * 3 + [(3, 3000)] * 3, [(3, 3000, 10.0)] * 3)
    slots = [view(1, 40_000, 200.0, 1), view(2, 3000, 5.0, 3)]
    d = sr.place_learned(slots, req(500), 1000.0, LEARNED, few, {})
    assert (d.slot, d.reason) == (2, "expired_keep")
    low = PolicyConfig(learn=LearnConfig(enabled=True, min_histories=6))
    assert sr.place_learned(slots, req(500), 1000.0, low, few, {}).reason == "learned"


def test_a_continued_conversation_stays_in_its_own_slot_and_blank_slots_go_first():
    own = [view(1, 40_000, 200.0, 1), view(2, 3000, 5.0, 3, common=3000)]
    d = sr.place_learned(own, req(3500), 1000.0, LEARNED, TAUGHT, {})
    assert (d.slot, d.reason, d.reused) == (2, "own_prefix", 3000)
    blank = [view(1, 40_000, 200.0, 1), view(2, 3000, 5.0, 3), SlotView(slot=3, blank=True)]
    assert sr.place_learned(blank, req(500), 1000.0, LEARNED, TAUGHT, {}).slot == 3


def test_protection_binds_only_with_learn_protect():
    # the 40K history is 10 s old: protected (about 65 s), the 3K one is past its 3.3 s
    slots = [view(1, 40_000, 10.0, 1), view(2, 3000, 5.0, 3)]
    assert sr.place_learned(slots, req(500), 1000.0, LEARNED, TAUGHT, {}).slot == 1
    protect = PolicyConfig(learn=LearnConfig(enabled=True, protect=True))
    d = sr.place_learned(slots, req(500), 1000.0, protect, TAUGHT, {})
    assert (d.slot, d.reason) == (2, "learned")
    # every history protected: the least expected re-read among them all (seed 000: the least value,
    # the 3K one); own counts only, the 40K first turns were never continued: cost 0
    young = [view(1, 40_000, 10.0, 1), view(2, 3000, 1.0, 3)]
    own_counts = PolicyConfig(learn=LearnConfig(enabled=True, protect=True, prior_weight=0))
    assert sr.place_learned(young, req(500), 1000.0, own_counts, TAUGHT, {}).slot == 1
    assert place(young, req(500), 1000.0, PolicyConfig(), {}).slot == 2


def test_below_keep_tps_goes_first_then_group_load():
    # slot 1 (group 0, busy group) holds a history not coming back; slot 2 (group 1, idle group) one that is
    slots = [SlotView(slot=1, group=0, n_tokens=40_000, last_use=800.0, turn=1),
             SlotView(slot=2, group=1, n_tokens=3000, last_use=995.0, turn=3),
             SlotView(slot=3, group=0, busy=True, n_tokens=100, last_use=999.0)]
    assert sr.place_learned(slots, req(500), 1000.0, LEARNED, TAUGHT, {0: 1, 1: 0}).slot == 1
    # with keep_tps above every cost, all count as not worth keeping: group load decides
    loose = PolicyConfig(learn=LearnConfig(enabled=True, keep_tps=1e9))
    assert sr.place_learned(slots, req(500), 1000.0, loose, TAUGHT, {0: 1, 1: 0}).slot == 2


def test_pick_slot_learned_keeps_seed_001_order_and_the_plain_policy_when_off():
    slots = [view(1, 40_000, 200.0, 1), view(2, 3000, 5.0, 3)]
    expire = PolicyConfig(expire_s=600, learn=LearnConfig(enabled=True))
    assert sr.pick_slot_learned(slots, req(500), 1000.0, expire, TAUGHT).reason == "shortest"
    assert sr.pick_slot_learned(slots, req(500), 1000.0, LEARNED, TAUGHT).reason == "learned"
    off = PolicyConfig(learn=LearnConfig(enabled=False))
    assert sr.pick_slot_learned(slots, req(500), 1000.0, off, TAUGHT).slot == 2
    no_affinity = PolicyConfig(cache_affinity=False)   # seed 001's plain order: learning does not apply
    assert sr.pick_slot_learned(slots, req(500), 1000.0, no_affinity, TAUGHT).reason == "lru"


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------

def test_learn_defaults_and_every_variable_is_read():
    assert PolicyConfig.from_env({}).learn == LearnConfig()
    assert LearnConfig() == LearnConfig(enabled=True, prior_weight=20.0, min_histories=50, protect=False,
                                        keep_tps=1.0)
    env = {"STRATA_SLOT_LEARNED": "1", "STRATA_SLOT_LEARN_PRIOR_WEIGHT": "5", "STRATA_SLOT_LEARN_MIN_HISTORIES": "0",
           "STRATA_SLOT_LEARN_PROTECT": "yes", "STRATA_SLOT_LEARN_KEEP_TPS": "0.5"}
    assert set(env) == set(LEARN_ENV_NAMES.values())
    assert PolicyConfig.from_env(env).learn == LearnConfig(True, 5.0, 0, True, 0.5)
    assert PolicyConfig.from_env({"STRATA_SLOT_LEARNED": " "}).learn.enabled is True
    assert PolicyConfig.from_env({"STRATA_SLOT_LEARNED": "0"}).learn.enabled is False


@pytest.mark.parametrize(("var", "raw"), [
    ("STRATA_SLOT_LEARNED", "2"), ("STRATA_SLOT_LEARN_PROTECT", "maybe"),
    ("STRATA_SLOT_LEARN_PRIOR_WEIGHT", "-1"), ("STRATA_SLOT_LEARN_PRIOR_WEIGHT", "abc"),
    ("STRATA_SLOT_LEARN_MIN_HISTORIES", "2.5"), ("STRATA_SLOT_LEARN_KEEP_TPS", "inf"),
    ("STRATA_SLOT_LEARN_KEEP_TPS", "nan"),
])
def test_invalid_learn_values_name_the_variable_and_value(var, raw):
    with pytest.raises(ValueError, match=f"{var}='{raw}'"):
        PolicyConfig.from_env({var: raw})


def test_invalid_learn_fields_name_the_variable():
    with pytest.raises(ValueError, match="STRATA_SLOT_LEARN_PRIOR_WEIGHT=-2"):
        LearnConfig(prior_weight=-2)
    with pytest.raises(ValueError, match="STRATA_SLOT_LEARNED=1"):
        LearnConfig(enabled=1)
    with pytest.raises(ValueError, match="STRATA_SLOT_LEARN_MIN_HISTORIES=1.5"):
        LearnConfig(min_histories=1.5)
    with pytest.raises(ValueError, match="learn="):
        PolicyConfig(learn=None)
