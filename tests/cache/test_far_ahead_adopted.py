"""A file another clock sealed far ahead is taken over (resealed now, its sidecar naming this clock) where that is
safe: no server of that clock uses the folder (its presence file, locked while it runs, server/cache/clock_presence)
and the folder's file system's clock agrees with this one (so it was the sealer's clock that ran ahead). Before,
aad0950 left every other clock's file as it was and counted it as sealed now in each run's index only: a recreated
container (its host name, so its clock id, changed) or an older Strata (no `sealed_by`) left files whose ages
stayed wrong for ever, the warning said again at every start.

Real files, simulated engine, two caches on one cold folder with their own injected clocks and clock ids; the
clocks start at the real time (the file system stamps the presence files with it)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time

import pytest

from tests.cache.conftest import Clock
from tests.cache.test_far_ahead_shared_folder import YEAR, mine_and_ahead, open_cache, park, sidecar_of

FAR = "sealed more than a day ahead"


def test_a_far_ahead_file_of_a_clock_no_server_uses_is_taken_over(folders, caplog):
    """A recreated container: the clock that sealed it (its old host name's) has no server on the folder."""
    mine, ahead, _ = mine_and_ahead(folders, "host-old")
    assert sidecar_of(folders, 1)["sealed_by"] == "host-old"
    mine.t += 60
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        again = open_cache(folders, mine, "host-new")
    again.close()
    d = sidecar_of(folders, 1)
    assert d["sealed_by"] == "host-new" and d["sealed_at"] == pytest.approx(mine.t)   # before: host-old, a year on
    assert "1 of those sealed by another clock" in caplog.text and "taken over" in caplog.text
    caplog.clear()
    mine.t += 60
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        open_cache(folders, mine, "host-new").close()
    assert FAR not in caplog.text                       # before: said again at every start, the file never aging


def test_a_server_of_that_clock_still_on_the_folder_keeps_its_files(folders, caplog):
    """Two servers on one folder, clocks a year apart: while the other runs, its files are left as they are (which
    clock is right cannot be told from the seals); once it has stopped they are taken over."""
    mine, ahead, other = mine_and_ahead(folders, "host-other", ahead_runs_on=True)
    before = sidecar_of(folders, 1)
    mine.t += 60
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        again = open_cache(folders, mine, "host-new")
    again.close()
    assert sidecar_of(folders, 1) == before
    assert "a server of that clock uses the folder now" in caplog.text
    other.close()
    mine.t += 60
    open_cache(folders, mine, "host-new").close()
    assert sidecar_of(folders, 1)["sealed_by"] == "host-new"


def test_a_server_of_that_clock_in_another_process_keeps_its_files(folders, caplog):
    """The presence lock is seen across processes: another process, its clock a year ahead of the file system's,
    holds its presence on the folder."""
    mine, ahead, _ = mine_and_ahead(folders, "host-other")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from strata.server.cache.clock_presence import announce\n"
         "from strata.server.cache.fileio import FileIO\n"
         f"f = announce(FileIO(), {str(folders['cold'])!r}, 'host-other', lambda: time.time() + {YEAR})\n"
         "print('held' if f.presence else 'none', flush=True)\n"
         "sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = sidecar_of(folders, 1)
        mine.t += 60
        with caplog.at_level(logging.WARNING, logger="strata.cache"):
            open_cache(folders, mine, "host-new").close()
        assert sidecar_of(folders, 1) == before
        assert "a server of that clock uses the folder now" in caplog.text
    finally:
        holder.stdin.close()
        holder.wait(60)


def test_this_clock_behind_the_file_system_takes_nothing_over(folders, caplog):
    """The right clock's server has stopped and this one's clock is a year behind: the file system stamps its files
    with the right time, so this clock is the suspect one and the right clock's files are left (aad0950's case)."""
    behind = Clock(time.time() - YEAR)
    a = open_cache(folders, behind, "host-behind")
    park(a, behind, (2,))
    a.close()
    right = Clock(time.time())
    b = open_cache(folders, right, "host-right")
    park(b, right, (1,))
    b.close()
    before = sidecar_of(folders, 1)
    behind.t += 60
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        open_cache(folders, behind, "host-behind").close()
    assert sidecar_of(folders, 1) == before
    assert "file system's clock is" in caplog.text and "ahead of this one" in caplog.text


def test_an_older_strata_s_file_naming_no_clock_is_taken_over(folders):
    mine, ahead, _ = mine_and_ahead(folders, "host-old")
    for p in folders["cold"].glob("strata-conv-*.json"):   # as a Strata before sealed_by wrote it
        d = json.loads(p.read_text())
        if d.pop("sealed_by", None) == "host-old":
            p.write_text(json.dumps(d))
    mine.t += 60
    open_cache(folders, mine, "host-new").close()
    d = sidecar_of(folders, 1)
    assert d["sealed_by"] == "host-new" and d["sealed_at"] == pytest.approx(mine.t)


def test_a_presence_left_by_a_server_that_died_is_not_live_and_is_removed(folders):
    mine, ahead, _ = mine_and_ahead(folders, "host-old")
    stale = folders["cold"] / ".strata-clock-host-old.somehost-4242-0a1b2c3d.live"   # not locked: its server died
    stale.write_bytes(b"")
    mine.t += 60
    open_cache(folders, mine, "host-new").close()
    assert sidecar_of(folders, 1)["sealed_by"] == "host-new"
    assert not stale.exists()
    assert not list(folders["cold"].glob(".strata-clock-*"))   # a clean close removes its own
