"""A far-ahead file is not taken over while a server whose clock is ahead of the folder's file system runs there,
whatever clock its sidecar names (review of 7a2f5a6).

7a2f5a6 took a far-ahead file over unless a server of the clock its sidecar names held a presence on the folder
(and always, for one naming no clock). But a server uses files other clocks' names are on: its own older Strata's
(no `sealed_by`: a start rewrites only far-ahead seals, so those stay nameless) and its host's under an earlier
name (a recreated container: the clock ran ahead the same, the name changed). To such a server those files are
current; taken over while it runs, they look a year old to it at its next start (aged out, evicted first:
aad0950's harm). A presence is kept only by a server whose clock is ahead of the file system's, the one kind to
which far-ahead files are current, so any live presence leaves them all alone.

Real files, simulated engine, caches on one cold folder with their own clocks from the real time (the file system
stamps the presence files with it)."""

from __future__ import annotations

import json
import logging

import pytest

from tests.cache.test_far_ahead_shared_folder import mine_and_ahead, open_cache, sidecar_of

IN_USE = "a server whose clock is ahead of the file system's uses the folder now"


@pytest.mark.parametrize("named", [True, False], ids=["earlier_host_name", "older_strata_no_name"])
def test_a_file_the_running_ahead_server_uses_is_left_as_it_is(folders, caplog, named):
    mine, ahead, _ = mine_and_ahead(folders, "host-old", mine_name="host-right")
    if not named:   # as its older Strata wrote it: no clock named
        for p in folders["cold"].glob("strata-conv-*.json"):
            d = json.loads(p.read_text())
            if d.pop("sealed_by", None) == "host-old":
                p.write_text(json.dumps(d))
    running = open_cache(folders, ahead, "host-new")    # the same clock, a year ahead, under its new name
    try:
        assert sum(1 for lvl in running.cascade.levels for _ in lvl.entries) == 2   # it uses the file
        before = sidecar_of(folders, 1)
        mine.t += 60
        with caplog.at_level(logging.WARNING, logger="strata.cache"):
            open_cache(folders, mine, "host-right").close()
        assert sidecar_of(folders, 1) == before            # before the fix: resealed a year back, named host-right
        assert IN_USE in caplog.text
    finally:
        running.close()
    mine.t += 60
    open_cache(folders, mine, "host-right").close()        # once it has stopped, taken over
    assert sidecar_of(folders, 1)["sealed_by"] == "host-right"


def test_a_start_meanwhile_sees_the_ahead_server_before_it_has_read_the_seals(folders, monkeypatch, caplog):
    """Two servers starting together: the right clock's start comes while the one a year ahead indexes the folder.
    7a2f5a6 made the ahead server's presence after it had indexed every folder, so the other start, in between,
    found none and took over files the ahead server had just indexed as current. Its presence is made before it
    reads a folder now."""
    from strata.server.cache.disk import DiskLevel
    mine, ahead, _ = mine_and_ahead(folders, "host-old", mine_name="host-right")
    before = sidecar_of(folders, 1)
    opened = DiskLevel.open
    other: list = []

    def open_then_the_other_starts(lvl):
        opened(lvl)
        if lvl.sealed_by == "host-new" and lvl.name == "cold" and not other:   # the ahead server has read the seals
            mine.t += 60
            other.append(open_cache(folders, mine, "host-right"))
            other[0].close()

    monkeypatch.setattr(DiskLevel, "open", open_then_the_other_starts)
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        running = open_cache(folders, ahead, "host-new")
    try:
        assert other and sum(1 for lvl in running.cascade.levels for _ in lvl.entries) == 2
        assert sidecar_of(folders, 1) == before      # before the fix: taken over between its index and its presence
        assert IN_USE in caplog.text
    finally:
        running.close()
