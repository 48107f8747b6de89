"""The conversation cache's folders and files are its user's alone. A history's sidecar lists its token ids (its
text: the code and the files an agent read, a secret in one) and its image the KV; they were written 0644 in
folders made 0755 (`~/.cache/strata/conversations` of a trial, session 20), so any other user of the machine
could read every conversation kept on disk. The XDG base directory spec asks 0700 of a folder an application
makes."""

from __future__ import annotations

import os
import stat
import sys

import pytest
from strata.installer.bench import disk_speed
from strata.installer.flow import check_writable

from tests.cache.conftest import history, park_history

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")


@pytest.fixture(autouse=True)
def usual_umask():
    old = os.umask(0o022)        # the usual umask, which left 0755 / 0644
    yield
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def files_of(folder) -> list[str]:
    return [os.path.join(folder, n) for n in os.listdir(folder)]


def test_the_folders_the_cache_makes_and_the_files_it_writes_are_private(make_cache, folders, clock):
    cache = make_cache(conversation_cache_mib=1, conversation_cache_cold_mib=100, conversation_cache_segment_mib=100)
    for seed in range(4):        # the RAM level (1 MiB) hands the older ones down to cold
        clock.t += 1
        park_history(cache, history(seed))
    cache.flush()
    assert cache.save_session("agent-1", 1)["n_tokens"] > 0
    cache.close()                # the rest written down at a stop
    for name in ("cold", "segments", "sessions"):
        written = files_of(folders[name])
        assert written and mode(folders[name]) == 0o700, name
        assert {os.path.basename(p): mode(p) for p in written} == {os.path.basename(p): 0o600 for p in written}


def test_a_folder_that_was_there_keeps_its_mode_and_gets_private_files(make_cache, folders, clock):
    os.makedirs(folders["cold"], mode=0o750)      # one its user made, for a group to read, say
    cache = make_cache(conversation_cache_mib=1, conversation_cache_cold_mib=100, conversation_cache_park="disk")
    park_history(cache, history(1))
    cache.flush()
    written = files_of(folders["cold"])
    assert written and mode(folders["cold"]) == 0o750
    assert all(mode(p) == 0o600 for p in written)


def test_setup_makes_the_proposed_folder_private(tmp_path):
    """`strata setup` made the cold folder (its write check, its disk bench) before the server ever ran."""
    check_writable(tmp_path / "a" / "conversations")
    assert mode(tmp_path / "a" / "conversations") == 0o700
    disk_speed(tmp_path / "b" / "conversations", size_mib=8)
    assert mode(tmp_path / "b" / "conversations") == 0o700
