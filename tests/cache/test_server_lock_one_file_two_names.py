"""A server holds each of its folders once, however it names them (server/cache/server_lock.py). Its holds were
told apart by the lock file's path: a folder it reaches by two names that the path does not unify (a
case-insensitive volume, macOS's default, `~/Cache` and `~/cache`; a bind mount; here a hard link, which needs no
privilege) opened the one lock file twice, and the second lock (POSIX flock, Windows msvcrt.locking: each open's
own) was refused by the first: the server refused itself, naming its own pid. 1835af4 made this likelier: the
segment and system-prompt folders are claimed too, beside the levels'. A folder nested in another is its own."""

from __future__ import annotations

import os

import pytest
from strata.server.cache import server_lock

MODEL = "ab" * 32
COLD, PROMPTS = "--conversation-cache-cold-dir", "--conversation-cache-system-prompt-dir"


def test_one_lock_file_under_two_names_is_one_hold(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    first = server_lock.claim(COLD, str(a), MODEL)
    b.mkdir()
    name = server_lock.lock_name(MODEL)
    os.link(a / name, b / name)                    # the same file, reached by another name
    try:
        second = server_lock.claim(PROMPTS, str(b), MODEL, wait_s=0)   # before: FolderInUse (pid <its own>)
    except server_lock.FolderInUse as e:
        server_lock.release(first)
        pytest.fail(f"refused itself: {e}")
    assert second == first and server_lock._held[first].count == 2
    server_lock.release(second)
    server_lock.release(first)
    assert not server_lock._held


def test_a_folder_nested_in_another_is_held_apart(tmp_path):
    cold = tmp_path / "cold"
    keys = [server_lock.claim(COLD, str(cold), MODEL), server_lock.claim(PROMPTS, str(cold / "prompts"), MODEL)]
    assert None not in keys and keys[0] != keys[1]
    for key in keys:
        server_lock.release(key)
    assert not server_lock._held
