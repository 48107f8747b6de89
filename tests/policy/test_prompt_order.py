"""The prompt-order policy (server/prompt_order.py): which prompt pieces one mixed step reads, in what order."""

from __future__ import annotations

import pytest
from strata.server import prompt_order


def plan(left, caps=None, start=0, order="shortest-first", budget=10_000, slice_tokens=32):
    return prompt_order.plan(left, caps or [256] * len(left), start, order=order, budget=budget,
                             slice_tokens=slice_tokens)


def test_a_short_prompt_is_read_first_and_the_long_one_gets_what_is_left_of_the_slice():
    # a 7K-token turn (index 0, its turn) and a 46-token side request: the side request whole, the turn 32 - 46 < 0
    assert plan([7000, 46], start=0) == [(1, 46)]
    assert plan([7000, 10], start=0) == [(1, 10), (0, 22)]


def test_round_robin_gives_each_its_piece_in_turn():
    assert plan([7000, 46], start=0, order="round-robin") == [(0, 256), (1, 46)]
    assert plan([7000, 46], start=1, order="round-robin") == [(1, 46), (0, 256)]


def test_the_shortest_piece_keeps_to_its_cap_and_the_budget():
    assert plan([7000, 300], caps=[64, 64], budget=40) == [(1, 40)]
    assert plan([7000, 300], caps=[64, 64]) == [(1, 64)]


def test_ties_keep_the_round_robin_and_finished_prompts_read_nothing():
    assert plan([500, 500, 0], start=1, slice_tokens=300) == [(1, 256), (0, 44)]
    assert plan([0, 0]) == []


def test_every_step_reads_something_while_a_prompt_has_tokens_left():
    for left in ([1, 9000], [9000, 9000, 3], [17, 17]):
        for start in range(len(left)):
            pieces = plan(left, start=start, slice_tokens=16)
            assert pieces and all(0 < n <= left[i] for i, n in pieces)
            assert pieces[0][0] == min(range(len(left)), key=lambda i: (left[i], (i - start) % len(left)))


@pytest.mark.parametrize("order, budget, slice_tokens, says", [
    ("longest-first", 10, 10, "'longest-first' is not one of shortest-first, round-robin"),
    ("shortest-first", -1, 10, "budget (-1)"),
    ("shortest-first", 10, -3, "slice (-3)"),
])
def test_bad_values_are_named(order, budget, slice_tokens, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        prompt_order.plan([5], [5], 0, order=order, budget=budget, slice_tokens=slice_tokens)


@pytest.mark.parametrize("flags, says", [
    ({"prompt_order": "fifo"}, "'fifo' is not one of shortest-first, round-robin"),
    ({"solo_slice_ms": -5}, "--solo-slice-ms: -5.0 is below the minimum 0"),
])
def test_bad_flags_are_named(flags, says):
    from strata.server.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=says):
        load_config(flags, environ={})


def test_a_prompt_passed_over_goes_first_in_the_next_step():
    # session 32's soak: a Codex turn (7,775 left) beside shorter ones, a 75-token slice: shortest-first alone gave
    # it nothing, step after step (592 s to its first token)
    left, caps = [7775, 3800, 1200, 900], [64] * 4
    assert prompt_order.plan(left, caps, 0, order="shortest-first", budget=75, slice_tokens=75) == [(3, 64), (2, 11)]
    assert prompt_order.plan(left, caps, 0, order="shortest-first", budget=75, slice_tokens=75,
                             passed_over=[1, 1, 0, 0]) == [(0, 64), (1, 11)]
    assert prompt_order.plan(left, caps, 0, order="shortest-first", budget=75, slice_tokens=75,
                             passed_over=[1, 3, 0, 0]) == [(1, 64), (0, 11)]     # passed over longest first


def test_a_long_prompt_beside_short_ones_that_keep_coming_is_read_every_other_step():
    """Steps as Scheduler._mixed_step takes them: a new 40-token side request arrives every step."""
    left, waits, long_read = [7000], [0], 0
    for _ in range(40):
        left, waits = left + [40], waits + [0]
        planned = prompt_order.plan(left, [64] * len(left), 0, order="shortest-first", budget=64, slice_tokens=64,
                                    passed_over=waits)
        read = dict(planned)
        long_read += 0 in read
        waits = [0 if i in read or left[i] <= 0 else w + 1 for i, w in enumerate(waits)]
        left = [n - read.get(i, 0) for i, n in enumerate(left)]
    assert long_read >= 20                 # before: 0 (every step went to the newest short prompt)
    assert max(waits) <= 1


@pytest.mark.parametrize("passed_over, max_passed_over, says", [
    ([0], 0, "max_passed_over must be at least 1"),
    ([0, 0], 1, "passed_over has 2 counts for 1 prompts"),
])
def test_bad_passed_over_values_are_named(passed_over, max_passed_over, says):
    with pytest.raises(ValueError, match=says):
        prompt_order.plan([5], [5], 0, order="shortest-first", budget=5, slice_tokens=5, passed_over=passed_over,
                          max_passed_over=max_passed_over)
