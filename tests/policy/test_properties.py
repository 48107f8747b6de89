"""Property tests over random slot tables (hypothesis drives the seed of a table generator).
benchmarks/policy_properties.py runs the same checks on 200,000 tables."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from strata.server.slot_policy import (
    PolicyConfig,
    RequestView,
    SlotView,
    holds_own_prefix,
    is_protected,
    near_match_tolerance,
    pick_slot,
    place,
)

from .reference import NOW, place_reference, random_table

SEEDS = st.integers(min_value=0, max_value=2**63)
CONFIGS = [PolicyConfig(), PolicyConfig(idle_value_zero_s=150), PolicyConfig(idle_value_zero_s=0),
           PolicyConfig(ttl_max_s=30, expired_keep_score=0.05)]


@settings(max_examples=1500, deadline=None)
@given(SEEDS)
def test_place_equals_the_staged_reference(seed):
    slots, request, load = random_table(random.Random(seed))
    for cfg in CONFIGS:
        assert place(slots, request, NOW, cfg, load).slot == place_reference(slots, request, NOW, cfg, load)


@settings(max_examples=1000, deadline=None)
@given(SEEDS)
def test_with_expire_off_pick_slot_is_plain_lru(seed):
    rng = random.Random(seed)
    slots = [SlotView(i, 0, rng.randint(1, 200_000), 0, NOW - rng.uniform(0, 5000), rng.random() < 0.2, False)
             for i in range(1, rng.randint(1, 8) + 1)]
    idle = [s for s in slots if not s.busy]
    d = pick_slot(slots, RequestView(1000), NOW, PolicyConfig(cache_affinity=False))
    want = min(idle, key=lambda s: (s.last_use, s.slot)).slot if idle else None
    assert d.slot == want


@settings(max_examples=1500, deadline=None)
@given(SEEDS)
def test_invariants_of_place(seed):
    slots, request, load = random_table(random.Random(seed))
    d = place(slots, request, NOW, PolicyConfig(), load)
    idle = [s for s in slots if not s.busy]
    if not idle:
        assert d.slot is None
        return
    chosen = next(s for s in slots if s.slot == d.slot)
    assert not chosen.busy
    best = max(s.common for s in slots)
    tol = near_match_tolerance(best, request.prompt_rate_tps, PolicyConfig())
    own = [s for s in idle if holds_own_prefix(s, tol, PolicyConfig())]
    holds_other = not chosen.blank and chosen.n_tokens > 0 and not holds_own_prefix(chosen, tol, PolicyConfig())
    if own:  # a continued conversation never takes a slot holding another conversation
        assert not holds_other
    else:  # never a protected slot while an expired (or blank) one exists
        if any(not is_protected(s, NOW, PolicyConfig()) for s in idle):
            assert not is_protected(chosen, NOW, PolicyConfig())
    assert d.reused >= chosen.common
