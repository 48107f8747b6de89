"""Which history a session save by conversation key saves (session_match.pick_keyed): the contexts labelled with
the key and the cache entries parked under it; the one holding the most, ties to a context, then the fastest
level; contexts that went different ways a conflict; while a context holds it, entries off its line ignored, and
with none, entries off the line of the one parked last."""

from __future__ import annotations

import pytest
from strata.server.session_match import KeyedHolder, pick_keyed

LINE = list(range(1, 41))
OFF = list(range(1, 21)) + [99] * 30    # shares 20 tokens with LINE, then goes another way (50 tokens)


def ctx(i, tokens):
    return KeyedHolder("context", i, tokens, f"slot {i}")


def entry(level, key, tokens, parked_at=0.0):
    return KeyedHolder(level, key, tokens, f"{level} cache entry {key}", parked_at)


@pytest.mark.parametrize("holders, chosen, conflict", [
    ([], None, False),
    ([entry("cold", "c", LINE[:30]), entry("warm", "w", LINE)], "w", False),        # no context: the most
    ([entry("cold", "c", LINE), entry("ram", "r", LINE)], "r", False),               # tie: the fastest level
    # entries alone that went different ways: the one parked last is the conversation now, the most on its line
    # (review of 806e04d: the longest was saved, the history from before a compaction under the key)
    ([entry("ram", "r", LINE[:30], 2.0), entry("cold", "o", OFF, 1.0)], "r", False),
    ([entry("ram", "r", LINE[:30], 1.0), entry("cold", "o", OFF, 2.0)], "o", False),
    ([entry("cold", "c", LINE, 1.0), entry("ram", "r", LINE[:25], 3.0), entry("warm", "o", OFF, 2.0)], "c", False),
    ([ctx(1, LINE[:10]), entry("cold", "c", LINE)], "c", False),    # parked, its context taken by a shorter turn
    ([ctx(1, LINE), entry("ram", "r", LINE)], 1, False),             # tie: a context (nothing to read back)
    ([ctx(1, LINE[:30]), entry("cold", "o", OFF)], 1, False),        # an entry off the live line is not it
    ([ctx(1, LINE[:30]), ctx(2, LINE), entry("ram", "r", LINE[:35])], 2, False),
    ([ctx(1, LINE), ctx(2, OFF)], None, True),                       # side requests went other ways
])
def test_pick_keyed(holders, chosen, conflict):
    choice = pick_keyed(holders)
    assert (None if choice.holder is None else choice.holder.ref, choice.conflict) == (chosen, conflict), choice
    if choice.holder is not None:
        assert f"{len(choice.holder.tokens)} tokens (the most)" in choice.reason
