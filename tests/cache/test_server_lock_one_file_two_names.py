"""A server holds each of its folders once, however it names them (server/cache/server_lock.py). Its holds were
told apart by the lock file's path: a folder it reaches by two names that the path does not unify (a
case-insensitive volume, macOS's default, `~/Cache` and `~/cache`; a bind mount; here a hard link, which needs no
privilege) opened the one lock file twice, and the second lock (POSIX flock, Windows msvcrt.locking: each open's
own) was refused by the first: the server refused itself, naming its own pid. 1835af4 made this likelier: the
segment and system-prompt folders are claimed too, beside the levels'. A folder nested in another is its own."""

from __future__ import annotations

import os

import pytest
from strata.server.cache import CacheConfig, server_lock

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


def test_two_of_its_stores_on_one_folder_by_two_names_are_refused_naming_both(tmp_path):
    """CacheConfig.check_folders refuses two stores on one folder by its path; by two names the path does not unify
    it could not tell, and the stores shared the folder (each indexing and evicting in the other's). One lock file
    claimed for two flags tells it: refused as check_folders refuses, nothing held."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    name = server_lock.lock_name(MODEL)
    (a / name).touch()
    os.link(a / name, b / name)
    config = CacheConfig.from_values({"conversation_cache_cold_dir": str(a), "conversation_cache_cold_mib": 8,
                                      "conversation_cache_system_prompt_dir": str(b),
                                      "conversation_cache_system_prompt_mib": 4}, {})
    with pytest.raises(server_lock.FolderInUse) as e:
        server_lock.claim_folders(config, MODEL)
    assert f"{COLD} and {PROMPTS} name the same folder {str(b)!r}" in str(e.value), str(e.value)
    assert "give each its own" in str(e.value) and "in use by another" not in str(e.value), str(e.value)
    assert not server_lock._held
