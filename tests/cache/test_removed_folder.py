"""A disk level's folder removed while the server runs (a user clearing the cache by hand, `rm -rf
~/.cache/strata/conversations`): the next write makes it again and forgets the entries that went with
it, and a move the disk cannot take is a warning, not silence. Before (a long-conversation trial,
session 19): every degradation to the removed cold folder failed, the RAM level evicted a conversation
per park without a log line (three 3,500-token conversations re-read their whole history turn after
turn), /metrics and the stop line still counted the 35 vanished cold entries ('kept for the next
start: ... cold (35 entries)')."""

from __future__ import annotations

import errno
import os
import shutil

from strata.server.cache.fileio import FileIO, FullDiskIO

from tests.cache.conftest import history, park_history

from .test_park_restore import continue_from_cache, fresh_continuation
from .test_read_only_folder import fill_cold


def on_disk_bytes(folder) -> int:
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder))


def test_a_removed_cold_folder_is_made_again_and_the_next_degradation_lands_there(make_cache, folders, clock,
                                                                                  caplog):
    cache, _ = fill_cold(make_cache, clock, conversation_cache_mib=1)
    (in_ram,) = cache.ram.entries
    shutil.rmtree(folders["cold"])
    clock.t += 1
    with caplog.at_level("WARNING", logger="strata.cache"):
        assert park_history(cache, history(10)).destination == "ram"
    cold = cache.cascade.levels[-1]
    assert sorted(cold.entries) == [in_ram]              # moved down; the vanished three are forgotten
    assert cold.used_bytes == on_disk_bytes(folders["cold"])
    assert cache.cascade.evictions["ram"] == 0           # nothing lost but what the user removed
    (line,) = [r.getMessage() for r in caplog.records if "was removed" in r.getMessage()]
    assert line == (f"conversation cache cold level: its folder {folders['cold']} was removed while the server "
                    "ran; made again (the 3 entries it held are gone)")
    prompt = history(3) + [1, 300]                       # the history that moved down restores from it
    hit, res, out, read = continue_from_cache(cache, prompt)
    assert (hit.level, res.n_tokens, read) == ("cold", 40, 2)
    assert out == fresh_continuation(prompt)
    old = history(0) + [1, 300]                          # one that went with the folder: a plain miss
    hit, res, out, read = continue_from_cache(cache, old)
    assert hit is None or hit.level == "ram"
    assert out == fresh_continuation(old)
    assert 'strata_cache_level_entries{level="cold"} 1' in cache.metrics_text()


def test_a_degradation_the_disk_cannot_write_is_a_warning_once_and_counted(make_cache, clock, caplog):
    """A RAM entry evicted because no disk level could write it is a lost history: said once (not at
    every park while the disk stays broken), counted per level in /metrics, and said again when it mends."""
    io = FullDiskIO(capacity=300_000)                    # less than one image: every write fails
    cache = make_cache(io=io, conversation_cache_mib=1, conversation_cache_cold_mib=100)
    with caplog.at_level("INFO", logger="strata.cache"):
        for seed in range(4):
            clock.t += 1
            park_history(cache, history(seed))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"conversation cache cold level: cannot write to {cache.cascade.levels[-1].folder} (")
    assert "No space left" in warnings[0] and warnings[0].endswith(
        "; histories go to a later level that takes them, else they are lost, until it can (check that folder, its "
        "free space and write permission)")
    assert cache.cascade.write_failures["cold"] == 3 and cache.cascade.evictions["ram"] == 3
    assert 'strata_cache_write_failures_total{level="cold"} 3' in cache.metrics_text()
    io.capacity = 1 << 40                                # space again: the next move says so
    caplog.clear()
    with caplog.at_level("INFO", logger="strata.cache"):
        clock.t += 1
        park_history(cache, history(9))
    assert [r.getMessage() for r in caplog.records if "can write" in r.getMessage()] == [
        f"conversation cache cold level: can write to {cache.cascade.levels[-1].folder} again (3 writes failed)"]


def test_the_stop_line_counts_only_the_entries_still_on_disk(make_cache, folders, clock):
    """'kept for the next start: ... cold /path (35 entries)' after the folder was removed (a trial):
    the stop checks its index against the files before saying what it kept."""
    from strata.server.app import stopped_line
    cache = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100)
    for seed in range(3):
        clock.t += 1
        park_history(cache, history(seed))
    cache.flush()
    cold = cache.cascade.levels[-1]
    gone = sorted(cold.entries)[0]
    os.remove(cold.sidecar_path(gone))                   # a user removing one entry's files by hand
    os.remove(cold.image_path(gone))
    cache.close()
    assert f"cold {folders['cold']} 100 MiB on (2 entries)" in stopped_line(cache)


def test_the_stop_line_after_the_folder_was_removed(make_cache, folders, clock):
    from strata.server.app import stopped_line
    cache = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100)
    park_history(cache, history(1))
    cache.flush()
    shutil.rmtree(folders["cold"])
    cache.close()
    assert f"cold {folders['cold']} 100 MiB on (0 entries)" in stopped_line(cache)


class WarmFolderBroken(FileIO):
    """Every new file in the warm folder fails (a failing drive); the cold folder works."""

    def __init__(self, warm) -> None:
        self.warm = str(warm)

    def open_new(self, path):
        if os.path.dirname(path) == self.warm:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return super().open_new(path)


def test_a_broken_warm_level_hands_histories_to_cold_and_says_so_once(make_cache, folders, clock, caplog):
    cache = make_cache(io=WarmFolderBroken(folders["warm"]), conversation_cache_mib=1,
                       conversation_cache_warm_mib=100, conversation_cache_cold_mib=100)
    with caplog.at_level("WARNING", logger="strata.cache"):
        for seed in range(3):
            clock.t += 1
            park_history(cache, history(seed))
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert line.startswith(f"conversation cache warm level: cannot write to {folders['warm']} (Input/output error); "
                           "histories go to a later level that takes them")
    assert cache.cascade.evictions["ram"] == 0 and len(cache.cascade.levels[-1].entries) == 2
    prompt = history(0) + [1, 300]
    hit, res, out, read = continue_from_cache(cache, prompt)
    assert (hit.level, read) == ("cold", 2) and out == fresh_continuation(prompt)
