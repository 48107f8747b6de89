"""slots.held_by_another, which a clean stop asks of each context before writing its history (3c68f43): a history
another context holds whole is not written twice, but only where that other context is itself written. A code
completion's context never is (ContextState.completion, 30166d7), so a history only it held whole was written by
neither: lost at the stop; nor is one larger than every disk level's whole budget (refused). A table over real
ContextStates."""

from __future__ import annotations

import pytest
from strata.server.slots import ContextState, held_by_another


def ctx(i: int, tokens: list[int], *, completion: bool = False, valid: bool = True) -> ContextState:
    return ContextState(id=i, group=-1 if i == 0 else 0, capacity=64, tokens=list(tokens), completion=completion,
                        valid=valid)


@pytest.mark.parametrize("others, held", [
    ([ctx(1, [1, 2, 3, 4])], True),                        # a longer history holds it: written there
    ([ctx(1, [1, 2, 3, 4], completion=True)], False),      # a completion's: never written (before: True, lost)
    ([ctx(1, [1, 2, 3, 4], valid=False)], False),          # unknown KV: holds nothing
    ([ctx(1, [1, 2, 9, 4])], False),                       # parted before its end
    ([ctx(1, [1, 2, 3, 4], completion=True), ctx(2, [1, 2, 3, 5])], True),   # another holds it too, written
])
def test_held_only_by_a_context_the_stop_writes(others, held):
    assert held_by_another([ctx(0, [1, 2, 3]), *others], 0) is held


def test_a_context_the_stop_cannot_keep_holds_nothing():
    """One in `unkept` (its history larger than every disk level's whole budget: its write is refused)."""
    contexts = [ctx(0, [1, 2, 3]), ctx(1, [1, 2, 3, 4])]
    assert held_by_another(contexts, 0) and not held_by_another(contexts, 0, unkept={1})
    assert held_by_another([*contexts, ctx(2, [1, 2, 3, 5])], 0, unkept={1})   # another one kept holds it


def test_of_two_equal_histories_the_first_holds_it():
    contexts = [ctx(0, [1, 2, 3]), ctx(1, [1, 2, 3])]
    assert not held_by_another(contexts, 0) and held_by_another(contexts, 1)
