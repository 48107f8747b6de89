"""A session saved from the first n tokens of a context (a save by conversation saves the part of a context that is
the conversation, not what another request added after it), and the parked histories a save by conversation finds
(`history_holders`). The simulated engine and cache of tests/cache."""

from __future__ import annotations

import pytest

from tests.cache.conftest import history

from .test_park_restore import fresh_continuation


def test_a_save_of_a_prefix_saves_those_tokens_and_their_kv(make_cache):
    cache = make_cache()
    eng = cache.engine
    h = history(1, 60)
    eng.prefill(1, h)
    info = cache.save_session("first-40", 1, 40)
    assert info["n_tokens"] == 40
    assert info["bytes"] < cache.save_session("all", 1)["bytes"]   # the prefix's KV only
    res = cache.restore_session("first-40", 2)
    assert res.n_tokens == 40 and eng.context_tokens(2) == h[:40]
    prompt = h[:40] + [1, 3]
    assert eng.continue_greedy(2, prompt, 5) == fresh_continuation(prompt)
    assert eng.context_tokens(1) == h                                   # the context saved from is untouched
    assert cache.admissions[("parking", "session_save")] == 2


@pytest.mark.parametrize("n", [0, -1, 61])
def test_a_prefix_the_context_does_not_hold_is_refused_naming_it(make_cache, n):
    cache = make_cache()
    cache.engine.prefill(1, history(1, 60))
    with pytest.raises(ValueError, match=f"context 1 holds 60 tokens: cannot save its first {n}"):
        cache.save_session("bad", 1, n)
    assert cache.list_sessions() == [] and cache.admissions[("parking", "session_save")] == 0


def test_history_holders_says_how_much_of_a_history_each_parked_conversation_holds(make_cache):
    cache = make_cache()
    eng = cache.engine
    a, b = history(1, 50), history(2, 30)
    eng.prefill(1, a)
    eng.prefill(2, b)
    key_a = cache.park(1).key
    key_b = cache.park(2).key
    held = {key: (level, matched, n) for level, key, matched, n in cache.history_holders(a[:45] + [9, 9])}
    assert held[key_a] == ("ram", 45, 50)
    shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)   # the system message and an opener
    assert 0 < shared < 30 and held[key_b] == ("ram", shared, 30)
