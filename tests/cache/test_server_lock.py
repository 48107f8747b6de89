"""The lock a server holds on its disk levels' folders (server/cache/server_lock.py), between real processes: a
holder's pid is named to the next, a file a dead holder left is taken over (the OS let its lock go: no pid is
guessed at), a refused start holds none of its folders, and a server of another model is not held off. The same
on Windows (msvcrt.locking on a byte past the text) as on POSIX (flock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from strata.server.cache import CacheConfig, server_lock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = "ab" * 32
HOLDER = textwrap.dedent("""
    import sys
    from strata.server.cache import server_lock
    server_lock.claim("--conversation-cache-cold-dir", sys.argv[1], sys.argv[2])
    print("held", flush=True)
    sys.stdin.read()
""")


@pytest.fixture
def holder(tmp_path):
    """start(folder) -> a process holding `folder` for MODEL until its standard input closes."""
    procs = []

    def start(folder, model: str = MODEL) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), model], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=ROOT)
        procs.append(p)
        assert p.stdout.readline().strip() == "held"
        return p

    yield start
    for p in procs:
        p.stdin.close()
        p.wait(30)


def test_a_held_folder_names_its_holder_until_it_ends(tmp_path, holder):
    p = holder(tmp_path / "cold")
    with pytest.raises(server_lock.FolderInUse) as e:
        server_lock.claim("--conversation-cache-cold-dir", str(tmp_path / "cold"), MODEL)
    assert f"(pid {p.pid}, running since " in str(e.value) and str(tmp_path / "cold") in str(e.value)
    assert "--conversation-cache-cold-mib 0" in str(e.value)
    p.kill()                                              # however it ends
    p.wait(30)
    key = server_lock.claim("--conversation-cache-cold-dir", str(tmp_path / "cold"), MODEL)
    assert key is not None
    server_lock.release(key)


def test_another_model_is_not_held_off(tmp_path, holder):
    holder(tmp_path / "cold")
    key = server_lock.claim("--conversation-cache-cold-dir", str(tmp_path / "cold"), "cd" * 32)
    assert key is not None
    server_lock.release(key)


def test_a_file_a_dead_holder_left_is_taken_over(tmp_path):
    folder = tmp_path / "cold"
    folder.mkdir()
    left = folder / server_lock.lock_name(MODEL)
    left.write_text(json.dumps({"pid": 2 ** 22 + 1, "host": "elsewhere", "since": 0.0}))
    key = server_lock.claim("--conversation-cache-cold-dir", str(folder), MODEL)
    try:
        assert json.loads(left.read_text())["pid"] == os.getpid()
        assert os.listdir(folder) == [left.name]          # nothing a level would index (no strata-conv- name)
    finally:
        server_lock.release(key)


def test_a_refused_start_holds_none_of_its_folders(tmp_path, holder):
    config = CacheConfig.from_values({"conversation_cache_warm_dir": str(tmp_path / "warm"),
                                      "conversation_cache_warm_mib": 8,
                                      "conversation_cache_cold_dir": str(tmp_path / "cold"),
                                      "conversation_cache_cold_mib": 8}, {})
    holder(tmp_path / "cold")
    with pytest.raises(server_lock.FolderInUse):
        server_lock.claim_folders(config, MODEL)
    assert not server_lock._held                          # warm's claim let go
    other = holder(tmp_path / "warm")                     # another process can have it
    assert other.poll() is None


def test_one_process_claims_a_folder_more_than_once(tmp_path):
    keys = [server_lock.claim("--conversation-cache-cold-dir", str(tmp_path / "cold"), MODEL) for _ in range(2)]
    assert keys[0] == keys[1] and server_lock._held[keys[0]].count == 2
    server_lock.release(keys[0])
    assert keys[0] in server_lock._held
    server_lock.release(keys[1])
    assert not server_lock._held


def test_only_the_levels_that_are_on_are_claimed(tmp_path):
    config = CacheConfig.from_values({"conversation_cache_warm_dir": str(tmp_path / "warm"),
                                      "conversation_cache_cold_dir": str(tmp_path / "cold"),
                                      "conversation_cache_cold_mib": 8}, {})
    assert server_lock.held_folders(config) == [("--conversation-cache-cold-dir", str(tmp_path / "cold"))]


def test_the_segment_and_system_prompt_folders_are_claimed_where_on(tmp_path):
    """Each server indexes them once and evicts only what it indexed, as a level's folder (session 41)."""
    config = CacheConfig.from_values({"conversation_cache_cold_dir": str(tmp_path / "cold"),
                                      "conversation_cache_cold_mib": 8,
                                      "conversation_cache_segment_dir": str(tmp_path / "seg"),
                                      "conversation_cache_segment_mib": 4,
                                      "conversation_cache_system_prompt_dir": str(tmp_path / "sys"),
                                      "conversation_cache_system_prompt_mib": 4}, {})
    assert server_lock.held_folders(config) == [("--conversation-cache-cold-dir", str(tmp_path / "cold")),
                                                ("--conversation-cache-segment-dir", str(tmp_path / "seg")),
                                                ("--conversation-cache-system-prompt-dir", str(tmp_path / "sys"))]
    off = CacheConfig.from_values({"conversation_cache_cold_dir": str(tmp_path / "cold"),
                                   "conversation_cache_cold_mib": 8,
                                   "conversation_cache_segment_dir": str(tmp_path / "seg")}, {})
    assert server_lock.held_folders(off) == [("--conversation-cache-cold-dir", str(tmp_path / "cold"))]


LETTING_GO = textwrap.dedent("""
    import sys, time
    from strata.server.cache import server_lock
    server_lock.claim("--conversation-cache-cold-dir", sys.argv[1], sys.argv[2])
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
""")


def test_a_holder_letting_go_is_waited_for(tmp_path):
    """Windows frees a dead process's lock only eventually (fileio.commit_lock unlocks before its close for that):
    the app's restart 0.5 s after its server crashed met the dead one's lock, was refused with exit status 2, and
    the app never retries that. A holder that lets go within `wait_s` is waited for (its end 1 s from now here)."""
    p = subprocess.Popen([sys.executable, "-c", LETTING_GO, str(tmp_path / "cold"), MODEL, "1.0"],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert p.stdout.readline().strip() == "held"
        key = server_lock.claim("--conversation-cache-cold-dir", str(tmp_path / "cold"), MODEL)
        assert key is not None
        server_lock.release(key)
    finally:
        p.kill()
        p.wait(30)


def test_the_wait_is_a_named_bound(tmp_path, holder):
    holder(tmp_path / "cold")
    with pytest.raises(ValueError, match="wait_s"):
        server_lock.claim("--conversation-cache-cold-dir", str(tmp_path / "cold"), MODEL, wait_s=-1)
    with pytest.raises(server_lock.FolderInUse):                  # still refused once the wait is over
        server_lock.claim("--conversation-cache-cold-dir", str(tmp_path / "cold"), MODEL, wait_s=0.2)
    assert not server_lock._held
