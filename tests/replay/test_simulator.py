"""The slot simulator on a tiny hand-computed timeline: exact prompt tokens read per policy."""

from __future__ import annotations

import pytest
from strata.server.replay.policies import make_policy
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
