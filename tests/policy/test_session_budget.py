"""The saved-sessions folder's budget as pure policy (server/cache/session_budget.py): exact decisions and drop
order."""

from __future__ import annotations

import pytest
from strata.server.cache.session_budget import SavedSession, plan_session_room

OWN = (SavedSession("c", 30, 3.0), SavedSession("a", 30, 1.0), SavedSession("b", 30, 1.0))


@pytest.mark.parametrize("used, need, replaced, budget, when_full, fits, drop, reason", [
    (90, 50, 0, 0, "reject", True, (), "no budget"),
    (40, 50, 0, 100, "reject", True, (), "fits the budget"),
    (90, 50, 40, 100, "reject", True, (), "fits the budget"),          # the save it replaces counts as gone
    (90, 50, 0, 100, "reject", False, (), "when-full reject"),
    (90, 101, 0, 100, "evict", False, (), "larger than the whole budget"),
    (90, 50, 0, 100, "evict", True, ("a", "b"), "2 least recently used"),   # oldest first, ties by key
    (90, 20, 0, 100, "evict", True, ("a",), "1 least recently used"),
    (200, 50, 0, 100, "evict", False, (), "not this model's sessions hold the rest"),
])
def test_plan_session_room(used, need, replaced, budget, when_full, fits, drop, reason):
    d = plan_session_room(used, need, replaced, budget, when_full, OWN)
    assert (d.fits, d.drop) == (fits, drop) and reason in d.reason, d


@pytest.mark.parametrize("args, said", [((-1, 1, 0, 1, "reject"), "folder_bytes must be >= 0, got -1"),
                                        ((1, 1, 0, 1, "drop"), "when_full must be one of reject, evict, got 'drop'")])
def test_bad_input_is_named(args, said):
    with pytest.raises(ValueError, match=said):
        plan_session_room(*args, OWN)
