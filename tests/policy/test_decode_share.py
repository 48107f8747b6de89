"""The decode-share policy (server/decode_share.py): while requests generate beside a prompt being read, which steps
only decode. Simulated with fixed step lengths: a 250-ms prompt step (a --prefill-slice-ms slice) and a 10-ms decode
step (the default model alone on two cores: ~100 tokens/s)."""

from __future__ import annotations

import pytest
from strata.server import decode_share


def run(share: float, steps: int, prompt_step_s: float = 0.25, decode_step_s: float = 0.01) -> list[str]:
    """The kinds of `steps` steps in order ('d': decode only, 'p': a prompt step), as the scheduler's ledger keeps."""
    prompt_s = decode_s = 0.0
    kinds = []
    for _ in range(steps):
        if decode_share.decode_turn(prompt_s, decode_s, share):
            decode_s += decode_step_s
            kinds.append("d")
        else:
            prompt_s += prompt_step_s
            kinds.append("p")
    return kinds


def test_zero_keeps_one_token_per_prompt_step():
    assert run(0.0, 50) == ["p"] * 50


def test_the_first_step_after_a_first_token_decodes_then_the_prompt_gets_its_step():
    assert run(0.5, 2) == ["d", "p"]


def test_half_the_time_each():
    kinds = run(0.5, 2000)
    n_p, n_d = kinds.count("p"), kinds.count("d")
    prompt_s, decode_s = 0.25 * n_p, 0.01 * n_d
    assert abs(decode_s / (prompt_s + decode_s) - 0.5) < 0.01
    # a generating request gets ~25 tokens of its own after each 250-ms prompt step, not one
    runs = "".join(kinds).split("p")[1:-1]
    assert all(24 <= len(r) <= 26 for r in runs), runs


@pytest.mark.parametrize("share", [0.1, 0.25, 0.5, 0.75, 0.9])
def test_the_prompt_keeps_its_share_and_is_read_every_so_many_steps(share):
    kinds = run(share, 5000)
    prompt_s = 0.25 * kinds.count("p")
    assert prompt_s / (prompt_s + 0.01 * kinds.count("d")) >= 1 - share - 0.01
    # never more decode-only steps in a row than the share of one prompt step holds (and one for the rounding)
    longest = max(len(r) for r in "".join(kinds).split("p"))
    assert longest <= share / (1 - share) * 0.25 / 0.01 + 2, longest


def test_slow_decode_steps_do_not_starve_the_prompt():
    # a decode step as long as a prompt step (many rows, a big model): they alternate
    assert run(0.5, 10, prompt_step_s=0.25, decode_step_s=0.25) == ["d", "p"] * 5


@pytest.mark.parametrize("share, prompt_s, decode_s, says", [
    (0.95, 0.0, 0.0, "decode share 0.95 is outside 0..0.9"),
    (-0.1, 0.0, 0.0, "decode share -0.1 is outside 0..0.9"),
    (0.5, -1.0, 0.0, "prompt -1.0"),
    (0.5, 0.0, -2.0, "decode -2.0"),
])
def test_bad_values_are_named(share, prompt_s, decode_s, says):
    with pytest.raises(ValueError, match=says.replace(".", r"\.")):
        decode_share.decode_turn(prompt_s, decode_s, share)


@pytest.mark.parametrize("flags, says", [
    ({"decode_share": 0.95}, "--decode-share: 0.95 is above the maximum 0.9"),
    ({"decode_share": -1}, "--decode-share: -1.0 is below the minimum 0"),
])
def test_bad_flags_are_named(flags, says):
    from strata.server.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=says):
        load_config(flags, environ={})
