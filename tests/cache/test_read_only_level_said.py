"""A disk level whose folder this process cannot write is said to be read-only, not on: in the start-up INFO line,
the stop's line, the monitor feed and the monitor's levels table. A new-user trial set a cold folder on a read-only
mount: the server warned once in its log ("nothing new is kept there") and then said "cold /path 4096 MiB on (0
entries)" at start and in the monitor, where nothing would ever be kept. Its entries are still read (the level stays
on for restores); the state said is looked at each time, so a folder writable again reads "on" again. Real files, a
real read-only bind mount (tests/cache/test_read_only_folder.read_only)."""

from __future__ import annotations

from strata.monitor.widgets.cache import level_cells
from strata.server.cache.report import describe, snapshot_for_monitor

from tests.cache.conftest import history, park_history
from tests.cache.test_read_only_folder import read_only


def cold_row(cache) -> dict:
    return next(row for row in snapshot_for_monitor(cache)["levels"] if row["name"] == "cold")


def test_a_read_only_cold_folder_is_said_read_only(make_cache, folders, clock):
    cache = make_cache(conversation_cache_cold_mib=2, conversation_cache_mib=0)
    clock.t += 1
    park_history(cache, history(1))
    cache.flush()
    cold = cache.cascade.levels[-1]
    assert cold.name == "cold" and len(cold.entries) == 1
    assert f"cold {folders['cold']} 2 MiB on (1 entry)" in describe(cache)
    with read_only(folders["cold"]):
        assert f"cold {folders['cold']} 2 MiB read-only (1 entry)" in describe(cache)            # before: on
        assert f"cold {folders['cold']} 2 MiB read-only (1 entry)" in describe(cache, kept=True)  # the stop's line
        row = cold_row(cache)
        assert row["state"] == "read-only" and row["entries"] == 1
        cells = level_cells(row)
        assert cells[1] == "read-only" and cells[3] != "\u2013"      # its use is shown: its entries are there
        assert cold.state == "on"                                     # still restores what it holds
    assert cold_row(cache)["state"] == "on"
    assert f"cold {folders['cold']} 2 MiB on (1 entry)" in describe(cache)
