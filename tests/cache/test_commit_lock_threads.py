"""A folder's commit lock between threads of one server and between processes. This process's threads take turns on
an in-process lock per folder (folder_holds.py) before the file lock, which then only arbitrates between processes.
Before, a thread waited for another thread of its own server as for another process: it polled the flock (1 to
50 ms apart), and a wait that gave up blamed "another process ... a Strata server on this folder that has hung?" (the
first test's message fails before; the others pass before and after on Linux, whose flock is per open file
description: they hold what must stay true, the file lock held through every thread's turn).

Real threads, a real flock held by a real second process (tests/cache/test_commit_lock_deadline.py's Holder)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from strata.server.cache.fileio import CommitLockHeld, FileIO

from tests.cache.test_commit_lock_deadline import Holder

pytest.importorskip("fcntl", reason="the other process holds a POSIX flock")

PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("held")
else:
    print("free")
"""


class ShortWait(FileIO):
    commit_lock_wait_s = 0.4


def probe(folder) -> str:
    """Whether another process can take the folder's flock now."""
    return subprocess.run([sys.executable, "-c", PROBE, str(folder)], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()


class Holding(threading.Thread):
    """A thread holding `folder`'s commit lock from `started` until `let_go` is set."""

    def __init__(self, io: FileIO, folder, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.io, self.folder = io, str(folder)
        self.started, self.let_go = threading.Event(), threading.Event()

    def run(self) -> None:
        with self.io.commit_lock(self.folder):
            self.started.set()
            self.let_go.wait(30)


def hold_in_thread(io: FileIO, folder, name: str) -> Holding:
    t = Holding(io, folder, name)
    t.start()
    assert t.started.wait(10)
    return t


def test_a_wait_past_a_thread_of_this_server_names_it_and_the_next_waits_again(tmp_path):
    io = ShortWait()
    first = hold_in_thread(io, tmp_path, "strata-test-first")
    began = time.monotonic()
    with pytest.raises(CommitLockHeld, match="held by this server's thread 'strata-test-first'"):
        with io.commit_lock(str(tmp_path)):
            pass
    assert 0.4 <= time.monotonic() - began < 1.5
    began = time.monotonic()
    with pytest.raises(CommitLockHeld):        # the same hold still lasts: given up at once
        with io.commit_lock(str(tmp_path)):
            pass
    assert time.monotonic() - began < 0.2
    first.let_go.set()
    first.join(10)
    # once that hold ended, a moment's contention is waited for again
    second = hold_in_thread(io, tmp_path, "strata-test-second")
    threading.Timer(0.1, second.let_go.set).start()
    with io.commit_lock(str(tmp_path)):
        assert second.let_go.is_set()                   # had once the other thread let go
    second.join(10)


def test_threads_of_one_process_take_turns_and_the_file_lock_stays_held_through_them(tmp_path):
    io, inside, overlaps, probes = FileIO(), [], [], []

    def commits(n: int) -> None:
        for _ in range(n):
            with io.commit_lock(str(tmp_path)):
                inside.append(threading.current_thread().name)
                if len(inside) > 1:
                    overlaps.append(list(inside))
                time.sleep(0.01)
                inside.remove(threading.current_thread().name)

    threads = [threading.Thread(target=commits, args=(20,), name=f"strata-test-{i}") for i in range(3)]
    holding = hold_in_thread(io, tmp_path, "strata-test-holding")
    for t in threads:
        t.start()
    time.sleep(0.2)                                     # the three wait for this process's holder, not the file
    probes.append(probe(tmp_path))                      # held while they wait: no waiter's close let it go
    holding.let_go.set()
    for t in threads:
        t.join(30)
    assert not overlaps and probes == ["held"] and probe(tmp_path) == "free"


def test_threads_wait_for_another_process_and_take_turns_once_it_lets_go(tmp_path):
    other = Holder(tmp_path)
    io, order, errors = FileIO(), [], []

    def commit() -> None:
        try:
            with io.commit_lock(str(tmp_path)):
                order.append(("in", threading.current_thread().name, time.monotonic()))
                time.sleep(0.05)
                order.append(("out", threading.current_thread().name, time.monotonic()))
        except OSError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=commit, name=f"strata-test-{i}") for i in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert order == []                                  # the other process holds it
    let_go_at = time.monotonic()
    other.let_go()
    for t in threads:
        t.join(30)
    assert not errors and [step for step, _, _ in order] == ["in", "out", "in", "out"]
    assert order[0][2] >= let_go_at and order[0][1] == order[1][1] and order[2][1] == order[3][1]


def test_a_second_thread_waiting_behind_one_that_waits_for_another_process_blames_the_process(tmp_path):
    other = Holder(tmp_path)
    io, errors = ShortWait(), []

    def commit() -> None:
        try:
            with io.commit_lock(str(tmp_path)):
                pass
        except CommitLockHeld as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=commit, name=f"strata-test-{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    other.let_go()
    assert len(errors) == 2 and all("another process" in e for e in errors), errors
    assert os.listdir(tmp_path) == []
