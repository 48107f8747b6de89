"""The sessions folder's budget with two servers on one folder (review of e44cae5): each server's saves take turns
(its session_writes), but another server's do not, and the budget was checked before the renames, outside the
folder's commit lock: two saves racing for the last room both saw it free and both went in, the folder past its
budget. The last check is made under the commit lock, against the folder as it is then; the save that finds the
room taken is refused, nothing of it written. Real files, two caches on one folder (as two servers: the commit lock
arbitrates between them as between processes), the simulated engine (64 tokens a MiB: a 50-token save ~0.8 MiB)."""

from __future__ import annotations

import os

import pytest
from strata.server.cache.memory import MIB
from strata.server.cache.sessions import SessionsFolderFullError

from tests.cache.conftest import folder_bytes, save_history


def _with_a_save_of_the_other_between_its_check_and_its_renames(cache, other, name: str) -> None:
    """Make `cache`'s next save, once its files are written and its budget check passed, wait while `other` saves
    `name` whole (the other server's save that wins the race for the last room)."""
    checked = cache._make_room

    def make_room(saving: str, need_bytes: int, *, drop: bool) -> None:
        checked(saving, need_bytes, drop=drop)
        if drop and not other.sessions.level.entries.get(other.sessions.key_of(name)):
            save_history(other, name, 9)

    cache._make_room = make_room


@pytest.mark.parametrize("when_full", ["reject", "evict"])
def test_two_servers_racing_for_the_last_room_keep_the_folder_within_its_budget(make_cache, folders, when_full):
    one = make_cache(conversation_cache_sessions_mib=2, conversation_cache_sessions_when_full=when_full)
    two = make_cache(conversation_cache_sessions_mib=2, conversation_cache_sessions_when_full=when_full)
    save_history(one, "a", 1)                                      # 0.8 of 2 MiB: room for one more save, not two
    _with_a_save_of_the_other_between_its_check_and_its_renames(one, two, "c")
    files = None
    with pytest.raises(SessionsFolderFullError) as e:      # before: saved, the folder at 2.4 MiB
        try:
            save_history(one, "b", 2)
        finally:
            files = sorted(os.listdir(folders["sessions"]))
    assert "session 'b' not saved" in str(e.value) and "the folder took more while this save was written" in str(e.value), str(e.value)
    assert folder_bytes(folders["sessions"]) <= 2 * MIB
    assert not any(n.startswith("strata-session-b~") for n in files)   # nothing of it written
    assert sorted(s["name"] for s in one.list_sessions()) == ["a", "c"]
    assert one.sessions.refusals == 1 and one.sessions.used_bytes == folder_bytes(folders["sessions"])
    assert one.restore_session("c", 0).n_tokens == 50 and one.restore_session("a", 0).n_tokens == 50


def test_evict_weighs_the_folder_as_it_is_not_as_this_server_indexed_it(make_cache, folders):
    """With evict, the saves to drop were taken from this server's index as it was: a save another server on the
    folder deleted since was 'dropped' (warned of and counted as deleted to make room, freeing nothing) and one it
    saved since was never weighed, so the save went past the budget (refused by the last check). The index is
    brought in step with the folder first."""
    one = make_cache(conversation_cache_sessions_mib=2, conversation_cache_sessions_when_full="evict")
    two = make_cache(conversation_cache_sessions_mib=2, conversation_cache_sessions_when_full="evict")
    save_history(one, "a", 1)
    save_history(one, "b", 2)
    assert sorted(s["name"] for s in two.list_sessions()) == ["a", "b"]      # two indexed them
    assert one.delete_session("a")                                           # then one deleted a and saved c
    save_history(one, "c", 3)
    assert save_history(two, "d", 4)["n_tokens"] == 50                              # before: refused, 'a' counted evicted
    assert two.sessions.evictions == 1 and two.sessions.refusals == 0
    assert sorted(s["name"] for s in two.list_sessions()) == ["c", "d"]      # b, the least recently used, went
    assert folder_bytes(folders["sessions"]) <= 2 * MIB
