"""A session DELETE whose file removal hangs (a network folder, a multi-GiB image an antivirus scans) holds no one:
its files are renamed out of the way under the sessions folder's commit lock (the sidecar first: the session is
deleted then, for this server, another on the folder and a restart), and removed after the lock, on the DELETE's
own thread, once the DELETE has answered. Before, the removal ran under the commit lock: every other save in the
folder, this server's (its threads) and another process's, waited COMMIT_LOCK_WAIT_S for it and failed, and the
DELETE itself waited for ever (a save under its name meanwhile a 409).

Real files, a real hang (fileio.HangingRemoveIO: the removal of the moved sidecar blocks until released), a real
second process probing the folder's flock, a real killed process whose moved files the next start removes."""

from __future__ import annotations

import errno
import logging
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from strata.server.cache.fileio import FileIO, HangingRemoveIO
from strata.server.cache.sessions import SessionBeingDeletedError

from tests.cache.conftest import history
from tests.cache.test_commit_lock_threads import probe

pytest.importorskip("fcntl", reason="the probe takes a POSIX flock")
REPO = Path(__file__).resolve().parents[2]


class Hanging(HangingRemoveIO):
    commit_lock_wait_s = 1.0   # a save that waits for the lock fails in 1 s, not 10


def files(folder) -> list[str]:
    return sorted(os.listdir(folder))


def moved(folder) -> list[str]:
    return [n for n in files(folder) if n.endswith(".tmp")]


def test_a_hung_removal_holds_neither_the_delete_nor_the_folder(make_cache, folders):
    io = Hanging()
    cache = make_cache(io=io)
    for name, seed in (("work", 1), ("other", 2)):
        cache.engine.prefill(1, history(seed, 40))
        cache.save_session(name, 1)
        cache.engine.truncate(1, 0)
    answered: list[bool] = []
    deleting = threading.Thread(target=lambda: answered.append(cache.delete_session("work")), daemon=True)
    deleting.start()
    assert io.hung.wait(10)
    deleting.join(5)
    assert answered == [True]                          # before: still waiting for the removal
    assert [n for n in moved(folders["sessions"]) if ".json." in n]   # the sidecar, moved, is what hangs
    assert probe(folders["sessions"]) == "free"        # another server may commit (before: 'held')
    began = time.monotonic()
    cache.engine.prefill(1, history(3, 40))
    cache.save_session("next", 1)                      # before: CommitLockHeld after 1 s
    cache.save_session("work", 1)                      # its name again (before: 409, being deleted)
    assert time.monotonic() - began < 0.9
    assert [s["name"] for s in cache.list_sessions()] == ["next", "other", "work"]
    assert cache.restore_session("work", 0).n_tokens == 40
    io.release()
    for _ in range(100):
        if not moved(folders["sessions"]):
            break
        time.sleep(0.05)
    assert moved(folders["sessions"]) == []
    assert {n.split("~")[0] for n in files(folders["sessions"])} == {
        "strata-session-next", "strata-session-other", "strata-session-work"}


CHILD = """
import sys, time
from strata.server.cache import CacheConfig, ConversationCache
from strata.server.cache.fileio import FileIO, HangingRemoveIO
from strata.server.cache.sessions import SessionBeingDeletedError
from strata.server.cache.memory import FixedMemory
from tests.cache.conftest import history
from tests.cache.sim_engine import SimEngine, SimFormat
cfg = CacheConfig.from_values({"conversation_cache_cold_dir": sys.argv[1] + "/cold",
                               "conversation_cache_sessions_dir": sys.argv[1] + "/sessions"}, {})
io = HangingRemoveIO()
cache = ConversationCache(cfg, SimEngine(), image_format=SimFormat, memory=FixedMemory(100_000), io=io)
cache.engine.prefill(1, history(1, 40))
cache.save_session("work", 1)
print(cache.delete_session("work"), io.hung.wait(10), flush=True)
sys.stdin.read()
"""


def test_files_a_killed_server_moved_out_of_the_way_are_removed_at_the_next_start(make_cache, folders, tmp_path):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert select.select([child.stdout], [], [], 60)[0], "the child's DELETE did not answer"
        assert child.stdout.readline() == "True True\n"   # deleted, its removal hanging
        assert len(moved(folders["sessions"])) == 2          # its sidecar and image, under temporary names
    finally:
        child.kill()
        child.wait(10)
    cache = make_cache()
    assert cache.list_sessions() == [] and not cache.has_session("work")
    assert files(folders["sessions"]) == []                  # the dead writer's moved files removed at the start
    assert len(cache.sessions.level.swept) == 2


class HangingMove(FileIO):
    """The rename of a session's sidecar out of the way hangs (a network folder gone: every call on it hangs)."""

    def __init__(self) -> None:
        self.hung, self.released = threading.Event(), threading.Event()

    def rename(self, src: str, dst: str) -> None:
        name = os.path.basename(src)
        if name.startswith("strata-session-work") and name.endswith(".json") and dst.endswith(".tmp"):
            self.hung.set()
            self.released.wait(30)
        super().rename(src, dst)


def test_a_delete_whose_move_hangs_is_given_up_at_the_stop(make_cache, folders, caplog):
    io = HangingMove()
    cache = make_cache(io=io)
    cache.engine.prefill(1, history(1, 40))
    cache.save_session("work", 1)
    errors: list[OSError] = []

    def delete() -> None:
        try:
            cache.delete_session("work")
        except OSError as exc:
            errors.append(exc)
    deleting = threading.Thread(target=delete, daemon=True)
    deleting.start()
    assert io.hung.wait(10)
    assert cache.list_sessions() == []                   # unlisted while it is moved
    with pytest.raises(SessionBeingDeletedError):
        cache.save_session("work", 1)                    # it would land among the files being moved
    with caplog.at_level(logging.WARNING, logger="strata.cache"):
        cache.close(persist=False)
        deleting.join(10)
    assert [e.errno for e in errors] == [errno.ECANCELED]
    assert any("the DELETE of session 'work' has not ended" in r.getMessage() for r in caplog.records)
    io.released.set()                                    # the move ends after the stop: the files are removed
    for _ in range(100):
        if not files(folders["sessions"]):
            break
        time.sleep(0.05)
    assert files(folders["sessions"]) == []
