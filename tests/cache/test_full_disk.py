"""A disk level that fills up before its budget does: a spill the disk refuses stays in RAM when RAM
can hold it, a clean stop says which histories it could not write, and a budget larger than the
volume is a warning at start-up (new-user trial: a 1024 MiB cold level on a 2 MiB volume discarded
9 parks with RAM 8192 MiB empty, and the stop lost 11 RAM histories without a word)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from strata.server.cache.fileio import FullDiskIO

from tests.cache.conftest import history, park_history

from .test_park_restore import continue_from_cache, fresh_continuation


def test_spill_refused_by_a_full_disk_stays_in_ram(make_cache, caplog):
    io = FullDiskIO(capacity=300_000)  # less than one image
    cache = make_cache(io=io, conversation_cache_mib=100, conversation_cache_cold_mib=100,
                       conversation_cache_park="disk")
    h = history(21, 60)
    with caplog.at_level("WARNING", logger="strata.cache"):
        assert park_history(cache, h).destination == "disk"
        cache.flush()
    assert cache.spill_failures == 1 and cache.parks["discard"] == 0
    assert len(cache.ram.entries) == 1
    assert any("kept in RAM instead" in r.getMessage() and "No space left" in r.getMessage() for r in caplog.records)
    prompt = h + [1, 400]
    hit, res, out, read = continue_from_cache(cache, prompt)
    assert hit.level == "ram" and res.n_tokens == 60 and read == 2
    assert out == fresh_continuation(prompt)


def test_spill_refused_without_ram_level_is_a_counted_discard(make_cache):
    io = FullDiskIO(capacity=300_000)
    cache = make_cache(io=io, conversation_cache_mib=0, conversation_cache_cold_mib=100)
    park_history(cache, history(22, 60))
    cache.flush()
    assert cache.spill_failures == 1 and cache.parks["discard"] == 1


def test_clean_stop_says_what_the_full_disk_could_not_keep(make_cache, folders, caplog):
    io = FullDiskIO(capacity=300_000)
    cache = make_cache(io=io, conversation_cache_mib=100, conversation_cache_cold_mib=100)
    for seed in (23, 24, 25):
        park_history(cache, history(seed, 60))
    with caplog.at_level("WARNING", logger="strata.cache"):
        cache.close()
    (msg,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert msg.startswith(f"stopping: 3 conversation histories could not be written to disk (last: cold {folders['cold']}")
    assert "No space left" in msg
    from strata.server.app import stopped_line  # the server's stop line says it too, not only "kept"
    line = stopped_line(cache)
    assert line.endswith("; the 3 RAM entries could not be written to disk and are lost")
    assert "ram 100 MiB" not in line, line   # RAM is not among what the next start finds (it read "(3 entries)")


def test_budget_beyond_the_volume_is_a_warning_at_start(make_cache, folders, caplog):
    folders["cold"].mkdir(parents=True)
    free_mib = shutil.disk_usage(folders["cold"]).free >> 20
    with caplog.at_level("WARNING", logger="strata.cache"):
        make_cache(conversation_cache_cold_mib=free_mib + 1024)
    (msg,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"budget {free_mib + 1024} MiB but its volume has room for" in msg
    assert "lower --conversation-cache-cold-mib" in msg
    caplog.clear()
    with caplog.at_level("WARNING", logger="strata.cache"):
        make_cache(conversation_cache_cold_mib=1)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_read_only_folder_is_a_warning_at_start(make_cache, folders, caplog):
    """Its entries are still read; the warning says nothing new is kept (a new-user trial: a read-only
    folder with entries started silently, and the clean stop lost 7 histories)."""
    cache = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100)
    park_history(cache, history(26, 60))
    cache.flush()
    os.chmod(folders["cold"], 0o555)
    mounted = False
    try:
        if os.access(folders["cold"], os.W_OK):  # root writes a 0555 folder: a read-only bind mount instead
            cold = str(folders["cold"])
            mounted = subprocess.run(["mount", "--bind", cold, cold], capture_output=True).returncode == 0
            if not mounted or subprocess.run(["mount", "-o", "remount,bind,ro", cold],
                                             capture_output=True).returncode != 0:
                pytest.skip("this user writes a 0555 folder and cannot mount one read-only")
        with caplog.at_level("WARNING", logger="strata.cache"):
            again = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100)
        (msg,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert "the folder is not writable" in msg and "its 1 entries are read" in msg
        assert again.lookup(history(26, 60) + [1]).n_tokens == 60
    finally:
        if mounted:
            subprocess.run(["umount", str(folders["cold"])], check=True)
        os.chmod(folders["cold"], 0o755)


def test_files_over_a_lowered_budget_are_a_warning_at_start(make_cache, caplog):
    """A user lowered the budget below what the folder held: the next writes deleted the oldest (357 MiB in
    the trial) without a word at start-up."""
    cache = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100)
    for seed in (27, 28, 29):
        park_history(cache, history(seed, 60))
    cache.flush()
    held = cache.cascade.levels[0].used_bytes
    with caplog.at_level("WARNING", logger="strata.cache"):
        make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=max(1, held // (1 << 20) // 2))
    (msg,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"holds {held >> 20} MiB in 3 entries, over its budget of" in msg
    assert "raise --conversation-cache-cold-mib to keep them" in msg


def test_clean_stop_writes_a_history_the_warm_level_refuses_to_cold(make_cache):
    """A new-user trial: warm 5 MiB, cold 1 GiB; the running conversation (41.7 MB) was lost at the stop
    because warm, the next level, could not take it, while cold had room."""
    cache = make_cache(conversation_cache_mib=100, conversation_cache_warm_mib=1, conversation_cache_cold_mib=10)
    park_history(cache, history(30, 100))  # 1.6 MiB: more than warm's whole budget
    park_history(cache, history(31, 20))
    cache.close()
    _, warm, cold = cache.cascade.levels
    assert not cache.ram.entries
    assert [e.n_tokens for e in warm.entries.values()] == [20]
    assert [e.n_tokens for e in cold.entries.values()] == [100]


def test_a_history_larger_than_the_whole_cold_budget_names_the_flag_to_raise(make_cache, caplog):
    """A cold budget below one history (new-user trial: 4 MiB against 7.4 MiB histories) was refused as
    '7788968 bytes > cold budget 4194304', with no word of which setting to change."""
    cache = make_cache(conversation_cache_mib=100, conversation_cache_cold_mib=1, conversation_cache_park="disk")
    h = history(26, 400)
    with caplog.at_level("WARNING", logger="strata.cache"):
        park_history(cache, h)
        cache.flush()
    (msg,) = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert "> the whole cold budget of 1.0 MiB: raise --conversation-cache-cold-mib" in msg, msg
    assert "one history of " in msg and len(cache.ram.entries) == 1      # kept in RAM meanwhile


def test_each_level_too_small_for_one_entry_names_a_flag_that_exists(make_cache):
    """The segment and system-prompt stores refuse an entry over their whole budget as the levels do; the
    system prompts' refusal named --conversation-cache-system_prompt-mib, a flag no command takes."""
    from strata.server.cache.options import OPTIONS

    cache = make_cache(conversation_cache_mib=1, conversation_cache_warm_mib=1, conversation_cache_cold_mib=1,
                       conversation_cache_segment_mib=1, conversation_cache_system_prompt_mib=1)
    flags = {"--" + o.name for o in OPTIONS}
    cascades = [cache.cascade, cache.segments.cascade, cache.system_prompts.cascade]
    levels = [(c, i) for c in cascades for i in range(len(c.levels))]
    assert sorted(c.levels[i].name for c, i in levels) == ["cold", "ram", "segment", "system_prompt", "warm"]
    for c, i in levels:
        room, why = c.make_room(i, 2 * 2**20, 0.0)
        assert not room and "> the whole" in why, why
        flag = why.rsplit("raise ", 1)[1]
        assert flag in flags, why
