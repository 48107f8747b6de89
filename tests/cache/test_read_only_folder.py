"""A full disk level whose folder turned read-only while the server ran (a file system remounted
read-only after a disk error, a folder chmod'ed by its owner): its entries cannot be evicted, so
nothing can be written there. That is a refusal like a full disk's (RAM keeps the newest, the spill
keeps the capture in RAM), never an OSError out of a park, the spill writer or the clean stop, and the
entries still on the folder stay indexed and restorable (their files are there and valid). Real
files, a real read-only bind mount (root writes a 0555 folder) or a 0555 folder."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest

from tests.cache.conftest import history, park_history

from .test_park_restore import continue_from_cache, fresh_continuation


@contextlib.contextmanager
def read_only(folder):
    """`folder` read-only for this process until the block ends."""
    folder = str(folder)
    os.chmod(folder, 0o555)
    mounted = False
    try:
        if os.access(folder, os.W_OK):  # root writes a 0555 folder: a read-only bind mount instead
            mounted = subprocess.run(["mount", "--bind", folder, folder], capture_output=True).returncode == 0
            if not mounted or subprocess.run(["mount", "-o", "remount,bind,ro", folder],
                                             capture_output=True).returncode != 0:
                pytest.skip("this user writes a 0555 folder and cannot mount one read-only")
        with pytest.raises(OSError):   # the condition is real: nothing can be removed there
            os.remove(os.path.join(folder, sorted(os.listdir(folder))[0]))
        yield
    finally:
        if mounted:
            subprocess.run(["umount", folder], check=True)
        os.chmod(folder, 0o755)


def fill_cold(make_cache, clock, **options):
    """A cache whose cold level (2 MiB: three 640 KiB histories) is full; returns (cache, the cold keys)."""
    cache = make_cache(conversation_cache_cold_mib=2, **options)
    for seed in range(4):
        clock.t += 1
        park_history(cache, history(seed))
    cache.flush()
    cold = cache.cascade.levels[-1]
    assert cold.name == "cold" and len(cold.entries) == 3
    return cache, sorted(cold.entries)


def test_a_park_into_full_ram_over_a_full_read_only_cold_level_keeps_the_newest(make_cache, folders, clock, caplog):
    """Before: the RAM level made room by degrading its oldest to cold, cold made room by deleting its
    oldest, the delete raised 'Read-only file system' out of park(): every later park was lost (the
    scheduler logs and goes on) while RAM held a history nobody would ask for again."""
    cache, cold_keys = fill_cold(make_cache, clock, conversation_cache_mib=1)
    with read_only(folders["cold"]):
        clock.t += 1
        h = history(10)
        with caplog.at_level("WARNING", logger="strata.cache"):
            r = park_history(cache, h)
        assert r.destination == "ram", r.reason
        assert list(cache.ram.entries) == [r.key]
        cold = cache.cascade.levels[-1]
        assert sorted(cold.entries) == cold_keys   # still on the folder, still valid: still indexed
        assert cache.cascade.refusals["cold"] >= 1
        prompt = h + [1, 300]
        hit, res, out, read = continue_from_cache(cache, prompt)
        assert (hit.level, res.n_tokens, read) == ("ram", 40, 2)
        assert out == fresh_continuation(prompt)
        old = history(0) + [1, 300]                # the cold entries restore from the read-only folder
        hit, res, out, read = continue_from_cache(cache, old)
        assert (hit.level, res.n_tokens, read) == ("cold", 40, 2)
        assert out == fresh_continuation(old)
        with caplog.at_level("WARNING", logger="strata.cache"):
            cache.close()                          # the stop says what it could not keep, and ends
        assert any(r.getMessage().startswith("stopping: 1 conversation histories could not be written")
                   for r in caplog.records)


def test_a_spill_to_a_full_read_only_cold_level_stays_in_ram(make_cache, folders, clock, caplog):
    """Before: the spill writer's eviction raised, the writer logged 'spill failed' and the capture
    stayed in the pending table for good (held in RAM outside every budget, never counted)."""
    cache, cold_keys = fill_cold(make_cache, clock, conversation_cache_mib=100, conversation_cache_park="disk")
    with read_only(folders["cold"]):
        clock.t += 1
        h = history(11)
        with caplog.at_level("WARNING", logger="strata.cache"):
            assert park_history(cache, h).destination == "disk"
            cache.flush()
        assert not cache._pending
        assert cache.spill_failures == 1 and cache.parks["discard"] == 0
        assert [e.n_tokens for e in cache.ram.entries.values()] == [40]
        assert any("kept in RAM instead" in r.getMessage() for r in caplog.records)
        assert sorted(cache.cascade.levels[-1].entries) == cold_keys
        hit, res, _, read = continue_from_cache(cache, h + [1, 300])
        assert (hit.level, res.n_tokens, read) == ("ram", 40, 2)


def test_a_read_only_level_that_cannot_evict_says_so_once_not_at_every_park(make_cache, folders, clock, caplog):
    """Before (a long-conversation trial, session 19): 29 identical 'cannot remove the files' warnings
    in 10 s, one or two a park, for as long as the folder stayed read-only. Now one warning that says
    what it means, every failure counted in /metrics, and an INFO line once files can be removed again."""
    cache, _ = fill_cold(make_cache, clock, conversation_cache_mib=1)
    with read_only(folders["cold"]):
        with caplog.at_level("WARNING", logger="strata.cache"):
            for seed in (10, 11, 12):
                clock.t += 1
                park_history(cache, history(seed))
        lines = [r.getMessage() for r in caplog.records if "cannot remove" in r.getMessage()]
        assert len(lines) == 1, lines
        assert lines[0].startswith("conversation cache cold level: cannot remove the files of ")
        assert lines[0].endswith("Read-only file system; the level keeps them and takes nothing new until files "
                                 f"can be removed from {folders['cold']} again")
        failures = cache.cascade.levels[-1].remove_failures
        assert failures >= 3
        assert f'strata_cache_remove_failures_total{{level="cold"}} {failures}' in cache.metrics_text()
    caplog.clear()
    with caplog.at_level("INFO", logger="strata.cache"):
        clock.t += 1
        park_history(cache, history(13))
    assert [r.getMessage() for r in caplog.records if "again" in r.getMessage()] == [
        f"conversation cache cold level: can remove files from {folders['cold']} again ({failures} removals failed)"]
