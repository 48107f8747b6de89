"""PolicyConfig: seed defaults, every variable read from the environment, invalid values refused."""

from __future__ import annotations

import pytest
from strata.server.slot_policy import ENV_NAMES, PolicyConfig


def test_seed_defaults():
    c = PolicyConfig.from_env({})
    assert (c.expire_s, c.ttl_max_s, c.expired_keep_score, c.idle_value_zero_s) == (0.0, 120.0, 0.01, 1800.0)
    assert (c.park_value_ratio, c.park_min_value, c.park_kept_share) == (2.0, 0.01, 0.98)
    assert (c.near_match_share, c.near_match_s, c.near_match_tokens, c.loss_tie_share) == (0.02, 1.0, 4096, 0.1)
    assert c.cache_affinity is True  # Strata's choice from the replay (docs/slot-policy.md)


def test_every_variable_is_read():
    env = {
        "STRATA_SLOT_EXPIRE_S": "600", "STRATA_SLOT_CACHE_AFFINITY": "0", "STRATA_SLOT_TTL_MAX_S": "60",
        "STRATA_SLOT_EXPIRED_KEEP_SCORE": "0.05", "STRATA_SLOT_IDLE_VALUE_ZERO_S": "150",
        "STRATA_SLOT_PARK_VALUE_RATIO": "0", "STRATA_SLOT_PARK_MIN_VALUE": "0.02",
        "STRATA_SLOT_PARK_KEPT_SHARE": "0.9", "STRATA_SLOT_NEAR_MATCH_SHARE": "0.05",
        "STRATA_SLOT_NEAR_MATCH_S": "2", "STRATA_SLOT_NEAR_MATCH_TOKENS": "8192",
        "STRATA_SLOT_LOSS_TIE_SHARE": "0.2", "STRATA_SLOT_OWN_MIN_SHARE": "0.8",
        "STRATA_SLOT_EDITOR_HOLD_S": "5", "STRATA_SLOT_EDITOR_MAIN": "0",
    }
    assert set(env) == set(ENV_NAMES.values())
    c = PolicyConfig.from_env(env)
    assert c == PolicyConfig(expire_s=600, cache_affinity=False, ttl_max_s=60, expired_keep_score=0.05,
                             idle_value_zero_s=150, park_value_ratio=0, park_min_value=0.02,
                             park_kept_share=0.9, near_match_share=0.05, near_match_s=2,
                             near_match_tokens=8192, loss_tie_share=0.2, own_min_share=0.8,
                             editor_hold_s=5, editor_main=False)


def test_unset_and_empty_keep_the_default_and_zero_disables():
    assert PolicyConfig.from_env({"STRATA_SLOT_EXPIRE_S": ""}).expire_s == 0.0
    assert PolicyConfig.from_env({"STRATA_SLOT_EXPIRE_S": "0"}).expire_s == 0.0
    assert PolicyConfig.from_env({"STRATA_SLOT_IDLE_VALUE_ZERO_S": "0"}).idle_value_zero_s == 0.0
    assert PolicyConfig.from_env({"STRATA_SLOT_CACHE_AFFINITY": "true"}).cache_affinity is True


@pytest.mark.parametrize(("var", "raw"), [
    ("STRATA_SLOT_EXPIRE_S", "ten"), ("STRATA_SLOT_EXPIRE_S", "-1"), ("STRATA_SLOT_EXPIRE_S", "inf"),
    ("STRATA_SLOT_EXPIRE_S", "nan"), ("STRATA_SLOT_TTL_MAX_S", "0"), ("STRATA_SLOT_CACHE_AFFINITY", "2"),
    ("STRATA_SLOT_PARK_KEPT_SHARE", "1.5"), ("STRATA_SLOT_PARK_KEPT_SHARE", "0"),
    ("STRATA_SLOT_PARK_VALUE_RATIO", "-2"), ("STRATA_SLOT_IDLE_VALUE_ZERO_S", "x"),
    ("STRATA_SLOT_NEAR_MATCH_TOKENS", "10.5"), ("STRATA_SLOT_NEAR_MATCH_SHARE", "3"),
    ("STRATA_SLOT_EXPIRED_KEEP_SCORE", "-0.1"), ("STRATA_SLOT_OWN_MIN_SHARE", "1.2"), ("STRATA_SLOT_PARK_MIN_VALUE", "1e999"),
])
def test_invalid_values_name_the_variable_and_value(var, raw):
    with pytest.raises(ValueError) as e:
        PolicyConfig.from_env({var: raw})
    assert var in str(e.value) and raw in str(e.value)


def test_direct_construction_is_validated_too():
    with pytest.raises(ValueError, match="STRATA_SLOT_TTL_MAX_S"):
        PolicyConfig(ttl_max_s=-5)
    with pytest.raises(ValueError, match="STRATA_SLOT_CACHE_AFFINITY"):
        PolicyConfig(cache_affinity=1)  # type: ignore[arg-type]
