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
