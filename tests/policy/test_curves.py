"""Protection, retention and value curves of seed 000, exact at the seed's points."""

from __future__ import annotations

import math

import pytest
from strata.server.slot_policy import PolicyConfig, protection_s, retention, value

from .factories import DEFAULT

SEED_POINTS = [(500, 0.1), (2_000, 2.0), (8_000, 10.0), (32_000, 45.0), (50_000, 65.0), (100_000, 90.0),
               (262_144, 120.0)]


@pytest.mark.parametrize(("n", "seconds"), SEED_POINTS)
def test_protection_at_the_seed_points(n, seconds):
    assert protection_s(n, DEFAULT) == pytest.approx(seconds)


def test_protection_is_linear_between_points_and_flat_past_the_last():
    assert protection_s(5_000, DEFAULT) == pytest.approx(6.0)     # halfway 2K..8K
    assert protection_s(9_000, DEFAULT) == pytest.approx(11.4583, rel=1e-4)  # seed: B (9K) about 11 s
    assert protection_s(7_900, DEFAULT) == pytest.approx(9.8667, rel=1e-4)   # seed: C (7.9K) about 10 s
    assert protection_s(400_000, DEFAULT) == 120.0
    assert protection_s(0, DEFAULT) == 0.0


def test_protection_scales_with_ttl_max():
    cfg = PolicyConfig(ttl_max_s=60)
    for n, s in SEED_POINTS:
        assert protection_s(n, cfg) == pytest.approx(s / 2)


def test_retention_fresh_50k_is_about_one_and_500_tokens_about_0_002():
    assert retention(50_000, 0, DEFAULT) == pytest.approx(0.9246, rel=1e-3)
    assert retention(500, 0, DEFAULT) == pytest.approx(0.0016, rel=0.01)


def test_retention_freshness_falls_linearly_to_a_quarter_at_expiry():
    n = 32_000
    fresh = retention(n, 0, DEFAULT)
    assert retention(n, 22.5, DEFAULT) == pytest.approx(fresh * (0.25 + 0.75 * 0.5))
    assert retention(n, 45.0, DEFAULT) == pytest.approx(fresh * 0.25)
    assert retention(n, 1000.0, DEFAULT) == pytest.approx(fresh * 0.25)


def test_value_is_continuous_at_expiry_and_quadratic_to_zero():
    n = 50_000
    ttl = 65.0
    floor = retention(n, 0, DEFAULT) * 0.25
    assert value(n, ttl - 1e-9, DEFAULT) == pytest.approx(floor, rel=1e-6)
    assert value(n, ttl, DEFAULT) == pytest.approx(floor)
    mid = ttl + (1800 - ttl) / 2
    assert value(n, mid, DEFAULT) == pytest.approx(floor * 0.75)
    assert value(n, 1800, DEFAULT) == 0.0
    assert value(n, 5000, DEFAULT) == 0.0


@pytest.mark.parametrize("n", [8_000, 32_000, 100_000, 262_144])
def test_value_zero_at_thirty_minutes_for_every_length(n):
    assert value(n, 1799.0, DEFAULT) > 0.0
    assert value(n, 1800.0, DEFAULT) == 0.0


def test_loss_per_second_accelerates_through_the_decay_window():
    n = 32_000
    drops = [value(n, t, DEFAULT) - value(n, t + 60, DEFAULT) for t in range(100, 1700, 200)]
    assert all(b > a for a, b in zip(drops, drops[1:], strict=False))


def test_decay_disabled_keeps_the_expired_quarter():
    cfg = PolicyConfig(idle_value_zero_s=0)
    assert value(32_000, 10_000, cfg) == pytest.approx(retention(32_000, 0, cfg) * 0.25)


def test_protection_wins_over_a_shorter_idle_limit():
    cfg = PolicyConfig(idle_value_zero_s=30)
    # 100K: protected 90 s; its retention holds while protected, then 0 at once
    assert value(100_000, 60, cfg) == pytest.approx(retention(100_000, 60, cfg))
    assert value(100_000, 60, cfg) > 0.1
    assert value(100_000, 90, cfg) == 0.0


def test_custom_idle_limit_150_as_in_the_seed_checks():
    cfg = PolicyConfig(idle_value_zero_s=150)
    assert value(12_900, 160, cfg) == 0.0
    assert value(42_100, 56.3, cfg) == pytest.approx(0.202, abs=0.001)
    assert value(10_062, 13.05, cfg) == pytest.approx(0.0566, abs=0.0005)
    assert not math.isnan(value(1, 0.0, cfg))


def test_overwrite_score_is_one_over_one_plus_retention():
    from strata.server.slot_policy import overwrite_score
    assert overwrite_score(50_000, 0, DEFAULT) == pytest.approx(1 / (1 + 0.92456), rel=1e-4)
    assert overwrite_score(500, 0, DEFAULT) > overwrite_score(50_000, 0, DEFAULT)   # short: cheaper
    assert overwrite_score(0, 0, DEFAULT) == 1.0
