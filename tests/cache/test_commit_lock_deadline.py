"""A folder's commit lock that another process holds past `commit_lock_wait_s`: what needs it is given up (a save
raises, as any OSError, and leaves nothing; a removal leaves the entry indexed), and the folder's next tries do
not wait; once the other lets go, it is had again. Before, the wait had no end (flock on POSIX,
msvcrt.locking retried for ever on Windows): a hung server on the folder held this one's spill writer and stop.

The holder is a real process holding a real flock on the folder (Windows' msvcrt is absent here; its try-once is
the one function that differs, and wait_for_lock is driven with real functions for its answers)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from strata.server.cache.fileio import CommitLockHeld, FileIO, _posix_try_lock, wait_for_lock

from tests.cache.conftest import history, park_history

pytest.importorskip("fcntl", reason="the holder is a POSIX flock")

TOKENS = history(1, 40)
HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()         # until the test closes it
"""


class Holder:
    """Another process holding `folder`'s commit lock until `let_go()`."""

    def __init__(self, folder) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline() == "held\n"

    def let_go(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(10)


@pytest.fixture
def hold() -> Iterator:
    made: list[Holder] = []

    def make(folder) -> Holder:
        made.append(Holder(folder))
        return made[-1]
    yield make
    for h in made:
        if h.proc.poll() is None:
            h.proc.kill()
            h.proc.wait()


class ShortWait(FileIO):
    commit_lock_wait_s = 0.5


def timed(fn):
    began = time.monotonic()
    try:
        fn()
    except CommitLockHeld:
        return time.monotonic() - began
    raise AssertionError("the lock was had")


def test_the_wait_ends_at_its_deadline_while_another_process_holds_the_lock(tmp_path, hold):
    holder = hold(tmp_path)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert 0.5 <= timed(lambda: wait_for_lock(lambda: _posix_try_lock(fd), 0.5)) < 1.5
        holder.let_go()
        began = time.monotonic()
        assert wait_for_lock(lambda: _posix_try_lock(fd), 0.5) is True
        assert time.monotonic() - began < 0.2
    finally:
        os.close(fd)


def test_a_lock_the_file_system_cannot_take_goes_on_unlocked_and_one_let_go_is_had():
    assert wait_for_lock(lambda: False, 5) is False                 # Windows: a share without locks (EINVAL)
    answers = iter([None, None, True])                              # held twice, then had
    assert wait_for_lock(lambda: next(answers), 5) is True
    ticks = iter(range(100))                                        # a clock of whole seconds, one a look
    with pytest.raises(CommitLockHeld, match="held by another process for 3.0 s"):
        wait_for_lock(lambda: None, 3, clock=lambda: float(next(ticks)), sleep=lambda s: None)


def test_a_save_is_given_up_whole_and_saved_once_the_other_lets_go(make_cache, folders, hold):
    cache = make_cache(io=ShortWait())
    cache.engine.prefill(1, TOKENS)
    cache.sessions.ensure_open()
    holder = hold(folders["sessions"])
    assert 0.5 <= timed(lambda: cache.save_session("work", 1)) < 1.5
    assert timed(lambda: cache.save_session("work", 1)) < 0.2       # the folder's next try does not wait
    with pytest.raises(CommitLockHeld, match="still held by another process"):
        cache.save_session("work", 1)
    assert os.listdir(folders["sessions"]) == []                     # nothing of either save is left
    holder.let_go()
    cache.save_session("work", 1)
    assert cache.restore_session("work", 0).n_tokens == len(TOKENS)


def test_a_removal_not_had_leaves_the_entry_indexed_and_its_files(make_cache, folders, hold):
    cache = make_cache(io=ShortWait(), conversation_cache_mib=0, conversation_cache_cold_mib=2)
    park_history(cache, TOKENS)
    cache.flush()                                                   # the spill writer has written it
    cold = cache.cascade.levels[cache.first_disk]
    (key,) = cold.entries
    files = sorted(os.listdir(folders["cold"]))
    holder = hold(folders["cold"])
    with pytest.raises(CommitLockHeld):
        cold.forget(key)
    assert key in cold.entries and sorted(os.listdir(folders["cold"])) == files
    holder.let_go()
    cold.forget(key)
    assert key not in cold.entries and os.listdir(folders["cold"]) == []


def test_a_start_leaves_damaged_files_it_cannot_lock_for_and_waits_once(make_cache, folders, hold, caplog):
    first = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100)
    for seed in (1, 2, 3):
        park_history(first, history(seed, 60))
    first.flush()
    entries = list(first.cascade.levels[0].entries.values())
    first.close(persist=False)
    for e in entries:
        with open(e.image_path, "r+b") as f:
            f.truncate(100)                                     # damaged: removed at the next start
    files = sorted(os.listdir(folders["cold"]))
    holder = hold(folders["cold"])
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        cache = make_cache(io=ShortWait(), conversation_cache_mib=0, conversation_cache_cold_mib=100)
    assert time.monotonic() - began < 1.5                       # one wait for three files, not three
    cold = cache.cascade.levels[0]
    assert dict(cold.skipped) == {"damaged": 3} and not cold.removed and sorted(os.listdir(folders["cold"])) == files
    left = [r.getMessage() for r in caplog.records if "could not be removed (its commit lock" in
            r.getMessage()]
    assert len(left) == 3, [r.getMessage() for r in caplog.records]
    holder.let_go()
    cache.close(persist=False)
    again = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100)
    assert dict(again.cascade.levels[0].removed) == {"damaged": 3} and os.listdir(folders["cold"]) == []
