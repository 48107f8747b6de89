"""A folder standing where one conversation's file should go in a level fails that one write and no other: the
write is skipped and counted (`write_failures`, /metrics), said once naming the path, and the entry stays where it
was. Before (session 39's cache trial), the level was taken as failing: each try warned `cannot write to` and the
next write of another key said `can write to ... again`, one pair a park; a warm entry whose cold name was taken could
never move down, so warm, `full and its oldest cannot degrade`, took no history at all while the folder stood there.
Simulated engine, real files and folders."""

from __future__ import annotations

import logging

from strata.server.cache.blocked_names import BlockedNames
from strata.server.cache.report import metrics_text

from tests.cache.conftest import history, park_history


def said(caplog, level: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and text in r.getMessage()]


def test_a_warm_entry_whose_cold_name_is_a_folder_stays_and_the_others_move(make_cache, folders, clock, caplog):
    cache = make_cache(conversation_cache_mib=0, conversation_cache_warm_mib=2, conversation_cache_cold_mib=8)
    clock.t += 1
    park_history(cache, history(0))
    cache.flush()
    warm, cold = cache.cascade.levels
    (stuck,) = warm.entries
    folders["cold"].mkdir(exist_ok=True)
    blocker = folders["cold"] / f"strata-conv-{stuck}.img"
    blocker.mkdir()
    (blocker / "notes.txt").write_text("a user's file")
    keys = {}
    with caplog.at_level(logging.DEBUG, logger="strata.cache"):
        for seed in range(1, 6):
            clock.t += 1
            keys[seed] = park_history(cache, history(seed)).key
            cache.flush()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and str(blocker) in warnings[0], warnings
    assert not said(caplog, logging.INFO, "can write to"), "the level never stopped working"
    assert stuck in warm.entries                                  # where it was
    assert set(warm.entries) == {stuck, keys[4], keys[5]}         # warm still takes the newest (3 fit)
    assert set(cold.entries) == {keys[1], keys[2], keys[3]}       # the others moved down in their order
    assert cache.cascade.write_failures["cold"] == 1              # tried once, then passed by
    assert 'strata_cache_write_failures_total{level="cold"} 1' in metrics_text(cache)
    assert (blocker / "notes.txt").read_text() == "a user's file"

    (blocker / "notes.txt").unlink()
    blocker.rmdir()                                               # moved away: it moves down at its turn
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        clock.t += 1
        park_history(cache, history(6))
        cache.flush()
    assert stuck in cold.entries and stuck not in warm.entries
    assert said(caplog, logging.INFO, f"{blocker} is no longer a folder")


def _cold_name_taken(make_cache, folders, clock):
    """A cache with a cold level whose one conversation's file name is now a folder's (the entry forgotten):
    (cache, cold level, its key, the folder)."""
    cache = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=2)
    clock.t += 1
    park_history(cache, history(0))
    cache.flush()
    cold = cache.cascade.levels[-1]
    (first,) = cold.entries
    cold.forget(first)
    blocker = folders["cold"] / f"strata-conv-{first}.img"
    blocker.mkdir()
    return cache, cold, first, blocker


def test_a_spill_whose_name_is_a_folder_is_skipped_and_counted_each_time(make_cache, folders, clock, caplog):
    cache, cold, first, blocker = _cold_name_taken(make_cache, folders, clock)
    with caplog.at_level(logging.DEBUG, logger="strata.cache"):
        for seed in (1, 2, 0, 3, 0):
            clock.t += 1
            park_history(cache, history(seed))
            cache.flush()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"{blocker}" in warnings[0], warnings   # no `spill of ... refused` warning
    assert len(said(caplog, logging.DEBUG, f"spill of {first} refused")) == 2
    assert cache.cascade.write_failures["cold"] == 2 and cache.spill_failures == 2
    assert len(cold.entries) == 3 and first not in cold.entries   # no room made for a write that cannot be done
    assert not said(caplog, logging.INFO, "let go")
    assert blocker.is_dir()


def test_the_counter_says_it_counts_the_skipped_tries(make_cache):
    # a try skipped for a folder on its name is counted in write_failures_total; its HELP said "an I/O error, a full
    # disk" alone, and a scrape reading it saw a failing disk where one name was taken
    text = metrics_text(make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=2))
    (help_line,) = [line for line in text.splitlines() if line.startswith("# HELP strata_cache_write_failures_total")]
    assert "a folder stands where" in help_line, help_line


def test_a_folder_moved_away_just_after_the_look_fails_that_write_alone(make_cache, folders, clock, caplog):
    """The look before any room is made found the folder; moved away before the failure was counted, the count's
    second look found none, and the level was taken as failing (`cannot write to` the folder, a `spill of KEY
    refused` warning, later `can write again`): the failure is the look's own, told by its error, not looked at
    again."""
    cache, cold, first, blocker = _cold_name_taken(make_cache, folders, clock)

    class MovedAwayJustAfterTheLook(BlockedNames):
        def check(self, lvl, key: str) -> None:
            try:
                super().check(lvl, key)
            finally:
                if blocker.is_dir():
                    blocker.rmdir()              # a user moving it away at that moment

    cache.cascade.blocked = MovedAwayJustAfterTheLook()
    with caplog.at_level(logging.DEBUG, logger="strata.cache"):
        clock.t += 1
        park_history(cache, history(0))
        cache.flush()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"cannot write to {blocker}: a folder stands there" in warnings[0], warnings
    assert not cache.cascade.is_failing(cold)
    assert cache.cascade.write_failures["cold"] == 1
