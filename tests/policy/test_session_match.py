"""session_match: which context or cache entry a session save by conversation saves from, and where a parked
history is read back first. Table-driven, no I/O."""

from __future__ import annotations

import pytest
from strata.server.session_match import (
    ContextView,
    Holder,
    one_line,
    pick_holder,
    pick_restore_context,
)


def _h(source: str, ref, matched: int) -> Holder:
    return Holder(source, ref, matched, f"{source} {ref}")


@pytest.mark.parametrize("holders, min_tokens, chosen", [
    # the most tokens of the history wins, wherever it is
    ([_h("context", 0, 40), _h("context", 2, 90), _h("ram", "k", 70)], 50, ("context", 2)),
    ([_h("context", 0, 40), _h("cold", "k", 120), _h("ram", "j", 70)], 50, ("cold", "k")),
    # ties: a context (nothing to read back), then the faster level, then the first given
    ([_h("cold", "k", 90), _h("ram", "j", 90), _h("context", 3, 90)], 50, ("context", 3)),
    ([_h("cold", "k", 90), _h("warm", "w", 90), _h("ram", "j", 90)], 50, ("ram", "j")),
    ([_h("context", 2, 90), _h("context", 1, 90)], 50, ("context", 2)),
    # holding less than the prompt of the request that answered is holding another history: none
    ([_h("context", 0, 49), _h("ram", "k", 10)], 50, None),
    ([], 1, None),
])
def test_pick_holder(holders, min_tokens, chosen):
    choice = pick_holder(holders, min_tokens)
    got = None if choice.holder is None else (choice.holder.source, choice.holder.ref)
    assert got == chosen, choice.reason


def test_none_held_says_the_closest():
    choice = pick_holder([_h("context", 0, 49), _h("ram", "k", 10)], 50)
    assert "first 50 tokens" in choice.reason and "context 0, holds its first 49" in choice.reason


def test_min_tokens_below_one_is_refused_naming_it():
    with pytest.raises(ValueError, match="min_tokens must be >= 1, got 0"):
        pick_holder([], 0)


def _v(id_: int, *, cap=512, idle=True, reserved=False, blank=False, last_use=None) -> ContextView:
    return ContextView(id_, cap, idle, reserved, blank, last_use, id_ == 0)


@pytest.mark.parametrize("views, n, chosen", [
    # a blank context first: nothing is displaced (a blank slot before a blank main: main is the solo one's)
    ([_v(0, blank=True), _v(1, last_use=5.0), _v(2, blank=True)], 100, 2),
    ([_v(0, blank=True), _v(1, last_use=5.0)], 100, 0),
    ([_v(0), _v(1, last_use=5.0), _v(2, blank=True)], 100, 2),
    # then the slot used longest ago, main last
    ([_v(0, last_use=1.0), _v(1, last_use=5.0), _v(2, last_use=3.0)], 100, 2),
    ([_v(0, cap=4096), _v(1, cap=512), _v(2, cap=512)], 1000, 0),
    # busy, waited for by a session call, or too small: never
    ([_v(0, idle=False), _v(1, reserved=True), _v(2, cap=64)], 100, None),
    ([_v(0, idle=False), _v(1, reserved=True), _v(2, cap=100)], 100, 2),
])
def test_pick_restore_context(views, n, chosen):
    assert pick_restore_context(views, n).ctx == chosen


def test_one_line():
    assert one_line([[1, 2, 3], [1, 2], [1, 2, 3]])
    assert not one_line([[1, 2, 3], [1, 4]])
    assert one_line([])
