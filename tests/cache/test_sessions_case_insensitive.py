"""Session names on a case-insensitive file system (Windows, macOS): 'Agent' and 'agent' name the same files
there. Symbolic links stand in for that file system's second name here (Linux is case-sensitive), which
is what the cache checks (os.path.samefile), not os.name. Not here: the rest of the sessions
(test_sessions.py)."""

from __future__ import annotations

import os

from tests.cache.conftest import history


def _alias(folder, existing: str, other: str) -> None:
    """Make `other`'s two file names open `existing`'s files, as NTFS does for a name in another case."""
    for ext in (".img", ".json"):
        os.symlink(os.path.join(folder, f"strata-session-{existing}{ext}"),
                   os.path.join(folder, f"strata-session-{other}{ext}"))


def test_saving_a_name_in_another_case_replaces_the_listed_session(make_cache, folders):
    cache = make_cache()
    eng = cache.engine
    first, second = history(1, 40), history(2, 60)
    eng.prefill(1, first)
    cache.save_session("Agent", 1)
    _alias(folders["sessions"], "Agent", "agent")
    eng.prefill(2, second)
    cache.save_session("agent", 2)
    # it listed both, and 'Agent' pointed at files that now held 'agent' (restored as damaged on Windows)
    assert [s["name"] for s in cache.list_sessions()] == ["agent"]
    res = cache.restore_session("agent", 0)
    assert res.n_tokens == 60 and eng.context_tokens(0) == second


def test_names_in_two_cases_are_two_sessions_where_the_file_system_tells_them_apart(make_cache):
    cache = make_cache()
    eng = cache.engine
    eng.prefill(1, history(1, 40))
    cache.save_session("Agent", 1)
    eng.prefill(2, history(2, 60))
    cache.save_session("agent", 2)
    assert [s["name"] for s in cache.list_sessions()] == ["Agent", "agent"]
    assert cache.restore_session("Agent", 0).n_tokens == 40
    assert cache.restore_session("agent", 1).n_tokens == 60
