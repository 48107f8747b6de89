"""Every number the monitor shows carries its unit; an absent value is a dash, never 0."""

from __future__ import annotations

import math

import pytest
from strata.monitor import units


@pytest.mark.parametrize("fn, value, text", [
    (units.tokens, 1234, "1,234 tok"), (units.tokens, None, units.NA),
    (units.tps, 85.24, "85.2 tok/s"), (units.tps, 16497.3, "16.5k tok/s"), (units.tps, 4073.1, "4,073 tok/s"), (units.tps, None, units.NA),
    (units.mib, 0.2, "0.2 MiB"), (units.mib, 512, "512 MiB"), (units.mib, 2560.1, "2.5 GiB"),
    (units.mib, math.nan, units.NA),
    (units.seconds, 0.143, "143 ms"), (units.seconds, 1.2, "1.2 s"), (units.seconds, 75, "1 min 15 s"),
    (units.seconds, 7300, "2 h 01 min"), (units.ms, 237.66, "238 ms"), (units.ms, 4.21, "4.2 ms"),
    (units.ago, 3.0, "3.0 s ago"), (units.ago, -1.0, "0 ms ago"), (units.count, 22, "22"),
    # a short history's value was 0.0000 (four fixed decimals): every slot alike in a new user's screenshot
    (units.score, 0.00213, "0.00213"), (units.score, 0.0000412, "4.12e-05"), (units.score, 1.2345, "1.23"),
    (units.score, 0.0, "0"), (units.score, None, units.NA),
    # the setup plan's reasons said "23040 bytes per token" where the header said "22.5 KiB/token"
    (units.per_token, 23040, "22.5 KiB/token"), (units.per_token, 640, "640 B/token"),
    (units.per_token, 3 * 2**20, "3.0 MiB/token"), (units.per_token, None, units.NA),
])
def test_formats(fn, value, text):
    assert fn(value) == text


def test_percent():
    assert units.percent(1432, 2048) == "70 %"
    assert units.percent(5, 0) == units.NA and units.percent(None, 5) == units.NA


@pytest.mark.parametrize(("part", "whole", "text"), [
    (646, 647, "99.8 %"), (5535, 5553, "99.6 %"), (9999, 10000, "99.9 %"), (99999, 100000, "99.9 %"),
    (647, 647, "100 %"), (0, 647, "0 %"), (1, 647, "0.2 %"), (1, 100000, "0.1 %"), (1, 200, "0.5 %"),
    (40, 41, "98 %"), (98, 100, "98 %"), (99, 100, "99 %"), (1, 100, "1 %"),
    # under 1 % never reads 1.0 % (it read so for 0.96 %), over 99 % never 100 %; 7 of 1,000 read 0.8 % (a float's
    # 7.000000000000001 tenths, rounded up)
    (96, 10000, "0.9 %"), (99, 10000, "0.9 %"), (9996, 10000, "99.9 %"), (7, 1000, "0.7 %"), (993, 1000, "99.3 %"),
])
def test_a_share_is_never_all_or_none_unless_it_is(part, whole, text):
    assert units.percent(part, whole) == text == units.share(part / whole)


def test_the_header_names_a_models_experts():
    from strata.monitor.widgets.header import model_text

    snap = {"model": {"name": "Qwen3-Coder-30B-A3B", "arch": "qwen3moe", "n_ctx_train": 262144,
                      "n_expert": 128, "n_expert_used": 8}}
    assert "128 experts, 8 a token" in model_text(snap).replace(units.NBSP, " ")
    assert "experts" not in model_text({"model": {"name": "dense", "arch": "llama"}})


def test_a_share_in_tenths_is_within_a_tenth_and_on_the_true_side_of_0_1_99_and_100():
    from fractions import Fraction

    for whole in (1000, 2000, 4096, 5000, 10000, 100000):
        for part in [*range(1, whole // 100 + 1), *range(whole - whole // 100, whole)]:
            shown, true = Fraction(units.percent(part, whole).removesuffix(" %")), Fraction(100 * part, whole)
            if 0 < true < 1:
                assert Fraction(1, 10) <= shown < 1 and abs(shown - true) < Fraction(1, 10), (part, whole, shown)
            elif 99 < true < 100:
                assert 99 <= shown < 100 and true - Fraction(1, 10) < shown <= true, (part, whole, shown)


@pytest.mark.parametrize("fn, value, text", [
    (units.seconds, 0.9996, "1.0 s"), (units.seconds, 59.96, "1 min 00 s"), (units.seconds, 59.94, "59.9 s"),
    (units.ago, 0.9997, "1.0 s ago"), (units.ms, 59_960, "1 min 00 s"), (units.ms, 999.4, "999 ms"),
    (units.ms, 999.6, "1.0 s"), (units.seconds, 3599.99, "59 min 59 s"),
])
def test_a_time_that_rounds_up_to_the_next_unit_is_said_in_it(fn, value, text):
    """Review of b31d3e4: a TTFT of 59,960 ms read "60.0 s" (as 59.96 s did anywhere) and a request that ended
    999.7 ms ago read "1000 ms ago"; b31d3e4 guarded only units.ms' own ms-to-s step, a second copy of the rule
    units.seconds lacked. Each unit now starts where the one below would round up to it."""
    assert fn(value) == text
