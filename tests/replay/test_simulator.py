"""The slot simulator on a tiny hand-computed timeline: exact prompt tokens read per policy."""

from __future__ import annotations

import pytest
from strata.server import slot_policy as sp
from strata.server import slot_returns as sr
from strata.server.replay.policies import LearnedPolicy, make_policy
from strata.server.replay.simulator import SimOptions, simulate
from strata.server.replay.timeline import build_requests

# (time, conversation, prompt, shared with the previous turn, output)
TINY = build_requests([
    (0, "A", 1000, 0, 100),
    (10, "B", 300, 0, 20),
    (20, "A", 1500, 1100, 100),   # continues A: its slot holds 1100
    (30, "C", 200, 0, 10),        # new: which history goes?
    (40, "B", 500, 320, 10),      # continues B (320 held if kept)
    (50, "A", 2000, 1600, 10),    # continues A (1600 held if kept)
])
TOTAL = 1000 + 300 + 1500 + 200 + 500 + 2000


# By hand, 2 slots. LRU: C takes B's slot, B then A's, A then C's: 1000+300+400+200+500+2000.
# Keeping A (shortest, gds, default/affinity: A's value > B's, C's): 1000+300+400+200+500+400.
# Belady (farthest next use) gives A up at t=30 (next use 50 > B's 40): 1000+300+400+200+180+2000.
@pytest.mark.parametrize(("policy", "read"), [
    ("lru", 4400), ("lcp-lru", 4400), ("expire:600", 2800), ("shortest", 2800), ("gds", 2800),
    ("gds+expire:600", 2800), ("affinity", 2800), ("default", 2800), ("oracle", 2800), ("oracle-belady", 4080),
    ("learned", 2800), ("learned+protect", 2800),  # 6 requests: below min_histories, seed 000 decides
])
def test_tiny_timeline_exact_counts(policy, read):
    r = simulate(TINY, 2, make_policy(policy))
    assert (r.prompt_tokens_total, r.prompt_tokens_read, r.requests) == (TOTAL, read, 6)
    assert r.reused_slot == TOTAL - read


def test_expire_takes_the_expired_lru_when_idle_long_enough():
    # expire:5 -> every history is expired at t=30, 40 and 50: the least recently used goes, as LRU
    r = simulate(TINY, 2, make_policy("expire:5"))
    assert r.prompt_tokens_read == 4400 and r.reasons["expired_lru"] == 3


def test_one_slot_reuses_only_what_the_last_request_left():
    r = simulate(TINY, 1, make_policy("lru"))
    assert r.prompt_tokens_read == 1000 + 300 + 1500 + 200 + 500 + 2000


def test_ram_cache_below_the_slots_brings_back_an_evicted_history():
    opts = SimOptions(ram_cache_tokens=10_000, ram_min_tokens=1_000)
    r = simulate(TINY, 2, make_policy("lru"), opts)
    # A (1600) evicted at t=40 and kept in RAM (B's 320 and C's 210 are below the minimum)
    assert (r.prompt_tokens_read, r.reused_ram) == (2800, 1600)
    small = simulate(TINY, 2, make_policy("lru"), SimOptions(ram_cache_tokens=1_500, ram_min_tokens=1_000))
    assert small.reused_ram == 0  # over the budget: not admitted


def test_time_model_makes_a_request_wait_for_a_busy_slot():
    reqs = build_requests([(0, "A", 1000, 0, 100), (10, "B", 300, 0, 20)])
    r = simulate(reqs, 1, make_policy("lru"), SimOptions(prefill_tps=100, decode_tps=10))
    assert r.waited_s == pytest.approx(10.0)  # A busy 0..20 (10 s prefill + 10 s decode)


def test_groups_and_affinity_move_a_continued_conversation_with_a_copy():
    opts = SimOptions(n_groups=2, prefill_tps=1000, decode_tps=10)
    reqs = build_requests([(0, "A", 1000, 0, 10), (2, "A", 1200, 1010, 10)])
    r = simulate(reqs, 2, make_policy("affinity"), opts)
    assert r.prompt_tokens_read == 1000 + 190


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="--slots"):
        simulate(TINY, 0, make_policy("lru"))
    with pytest.raises(ValueError, match="--groups"):
        SimOptions(n_groups=0)
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("fifo")
    with pytest.raises(ValueError, match="expire:x"):
        make_policy("expire:x")
    with pytest.raises(ValueError, match="expire:0"):
        make_policy("expire:0")


def test_a_continued_turn_waits_for_its_parent_answer_with_rates():
    # A's second turn is stamped 1 s after the first, but the first is served until 10 + 10 s:
    # the client sends it after the answer, so it finds its own slot (reads 400, not 1500)
    reqs = build_requests([(0, "A", 1000, 0, 100), (1, "A", 1500, 1100, 10)])
    r = simulate(reqs, 2, make_policy("lru"), SimOptions(prefill_tps=100, decode_tps=10))
    assert (r.prompt_tokens_read, r.waited_s) == (1000 + 400, 0.0)


# Learned policy, 2 slots, prior_weight 1, from the second request on (min_histories 1).
# A continues twice (gaps 5 s and 3 s), S (3000) arrives at 6, T (600) needs a slot at 9, A again at 12.
LEARN_TL = build_requests([
    (0, "A", 1000, 0, 0),
    (5, "A", 1500, 1000, 0),
    (6, "S", 3000, 0, 0),
    (8, "A", 1800, 1500, 0),
    (9, "T", 600, 0, 0),
    (12, "A", 2000, 1800, 0),
])


def test_learned_policy_on_a_hand_computed_timeline():
    # At t=9 the counts are: made (turn 1, 1000), (2, 1500), (1, 3000), (3, 1800); first continuations
    # (1, 1000) after 5 s (bin [4, 8)) and (2, 1500) after 3 s (bin [2, 4)). With one pseudo-history:
    # all: q[2] = q[3] = 1/4. A's 1800 (turn 3, length 1K-2K: made 2, one back in [2,4)):
    #   length (1 + 1/4) / 3 = 5/12 and (0 + 1/4) / 3 = 1/12; turn x length: halves: 5/24, 1/24.
    #   idle 1 s: p = 1/4, wait (5/24 x 2 + 1/24 x 5) / (1/4) = 2.5 s: 0.25 x 1800 / 2.5 = 180 tok/s.
    # S's 3000 (turn 1, 2K-4K, never back): q = 1/16 in both bins; idle 3 s: F(3) = 1/32, p = 3/31,
    #   wait (1/32 x 0.5 + 1/16 x 3) / (3/32) = 13/6 s: (3/31) x 3000 / (13/6) = 134 tok/s. S goes.
    cfg = sp.PolicyConfig(learn=sp.LearnConfig(enabled=True, prior_weight=1, min_histories=1))
    pol = LearnedPolicy("learned", cfg)
    r = simulate(LEARN_TL, 2, pol)
    # 1000 + 500 + 3000 + 300 + 600 (T in S's slot) + 200 (A keeps its slot)
    assert (r.prompt_tokens_read, r.reasons["learned"]) == (5600, 1)
    assert pol.stats.histories == 6 and pol.turn == {0: 1, 1: 2, 2: 1, 3: 3, 4: 1, 5: 4}
    views = [sp.SlotView(slot=1, n_tokens=1800, last_use=8.0, turn=3),
             sp.SlotView(slot=2, n_tokens=3000, last_use=6.0, turn=1)]
    st = sr.ReturnStats()
    for turn, n in ((1, 1000), (2, 1500), (1, 3000), (3, 1800)):
        st = sr.note_history(st, turn, n)
    st = sr.note_return(sr.note_return(st, 1, 1000, 5.0), 2, 1500, 3.0)
    assert sr.expected_reread_rate(views[0], 9.0, st, cfg.learn) == pytest.approx(180.0)
    assert sr.expected_reread_rate(views[1], 9.0, st, cfg.learn) == pytest.approx((3 / 31) * 3000 / (13 / 6))
    # seed 000 (default) gives up A's slot at t=9 (both protected; A's value is the lower): A reads 2000
    assert simulate(LEARN_TL, 2, make_policy("default")).prompt_tokens_read == 7400


def test_a_conversation_moved_to_another_slot_leaves_its_old_copy_worth_nothing():
    """As the server (SlotTable.supersede_copies): A moves to a blank slot of the less loaded group (B busy in
    A's group), copying from its own; its old copy is superseded, so the new conversation C takes it rather than
    E's history, and E's next turn reads only its new tokens. Before, the old copy kept its full worth (4,010
    tokens, worth keeping), C took E's slot and E read all 710 tokens again."""
    opts = SimOptions(n_groups=2, prefill_tps=1000, decode_tps=10)
    reqs = build_requests([
        (0, "A", 4000, 0, 10),          # slot 1 (group 0), ends at 5
        (0.01, "E", 600, 0, 10),        # slot 2 (group 1): 610 tokens, not worth keeping once expired
        (0.02, "B", 2000, 0, 150),      # slot 3 (group 0), busy until 17
        (10, "A", 4200, 4010, 10),      # group 0 loaded: slot 4 (group 1), copied from slot 1
        (20, "C", 300, 0, 10),          # new: slot 1 (A's old copy), not E's
        (30, "E", 710, 610, 10),        # E's history kept: 100 read
    ])
    for name in ("default", "learned"):
        r = simulate(reqs, 4, make_policy(name), opts)
        assert r.prompt_tokens_read == 4000 + 600 + 2000 + 190 + 300 + 100, name
        assert r.reasons["blank_less_loaded"] == 1 and r.reasons["blank"] >= 1, r.reasons
