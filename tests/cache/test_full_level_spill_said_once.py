"""A disk level that refuses spills because it is full (when-full=reject, or its oldest cannot be removed: a full
level whose folder went read-only) says so once (that, and the first history's fate), then counts: each refused
spill was a WARNING of its own before (`spill of KEY refused (cold full (when-full=reject))`, one a park), as the
read-only case was (test_read_only_spill_said_once.py). A spill written there again ends that state: the next
refusal is said again.
A history larger than the level's whole budget is about that history, not the level: said each time. Real files."""

from __future__ import annotations

import logging

from tests.cache.conftest import history, park_history
from tests.cache.test_read_only_folder import fill_cold, read_only
from tests.cache.test_read_only_spill_said_once import spill_lines


def park_some(cache, clock, seeds, caplog, n_tokens: int = 40) -> None:
    with caplog.at_level(logging.DEBUG, logger="strata.cache"):
        for seed in seeds:
            clock.t += 1
            park_history(cache, history(seed, n_tokens))
            cache.flush()


def test_a_full_level_that_rejects_says_it_once(make_cache, clock, caplog):
    with caplog.at_level(logging.DEBUG, logger="strata.cache"):   # its 4th park is refused: said there
        cache, cold_keys = fill_cold(make_cache, clock, conversation_cache_mib=0,
                                     conversation_cache_when_full="reject")
    park_some(cache, clock, range(10, 15), caplog)
    assert len(spill_lines(caplog, logging.WARNING)) == 1, spill_lines(caplog, logging.WARNING)
    assert len(spill_lines(caplog, logging.DEBUG)) == 5
    assert cache.spill_failures == 6                              # each counted
    cache.cascade.discard(cold_keys[0], "test")                   # room: the next one is written
    caplog.clear()
    park_some(cache, clock, [20, 21, 22], caplog)
    assert len(spill_lines(caplog, logging.WARNING)) == 1        # full again: a new state, said again
    assert len(spill_lines(caplog, logging.DEBUG)) == 1


def test_a_full_read_only_level_says_it_once(make_cache, folders, clock, caplog):
    cache, _ = fill_cold(make_cache, clock, conversation_cache_mib=0)
    caplog.clear()
    failures = cache.spill_failures
    with read_only(folders["cold"]):
        park_some(cache, clock, range(10, 15), caplog)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # what the level cannot do, and what became of the first history (as a read-only level's two lines)
    assert len(warnings) == 2 and "cannot remove the files" in warnings[0], warnings
    assert len(spill_lines(caplog, logging.WARNING)) == 1
    assert len(spill_lines(caplog, logging.DEBUG)) == 4
    assert cache.spill_failures == failures + 5
    assert cache.cascade.levels[-1].remove_failures == 5


def test_a_history_larger_than_the_whole_budget_is_said_each_time(make_cache, clock, caplog):
    cache, _ = fill_cold(make_cache, clock, conversation_cache_mib=0, conversation_cache_when_full="reject")
    caplog.clear()
    park_some(cache, clock, [10, 11], caplog, n_tokens=200)      # ~3.2 MiB against 2
    warned = spill_lines(caplog, logging.WARNING)
    assert len(warned) == 2 and all("whole cold budget" in w for w in warned), warned
