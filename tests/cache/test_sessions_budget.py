"""The saved-sessions folder's budget (--conversation-cache-sessions-mib): a save past it is refused by default
(507 over HTTP, naming the flag, the folder's use and what frees room), or, with
--conversation-cache-sessions-when-full evict, makes room by deleting this model's least recently used saves. The
folder never holds more than the budget; a damaged file in it is skipped, counted, and its bytes count; a restart
measures the same use. Real files, the simulated engine (64 tokens a MiB)."""

from __future__ import annotations

import os

import pytest
from strata.server.cache.memory import MIB
from strata.server.cache.session_store import model_tag
from strata.server.cache.sessions import SessionsFolderFullError

from tests.cache.conftest import folder_bytes, history, save_history

from .test_sessions import run_http


def test_a_save_past_the_budget_is_refused_and_the_saves_stay(make_cache, folders):
    cache = make_cache(conversation_cache_sessions_mib=2)   # two saves of 50 tokens (~0.8 MiB each) fit, not three
    save_history(cache, "a", 1)
    save_history(cache, "b", 2)
    files = sorted(os.listdir(folders["sessions"]))
    with pytest.raises(SessionsFolderFullError) as e:
        save_history(cache, "c", 3)
    said = str(e.value)
    for part in ("session 'c' not saved", str(folders["sessions"]), "--conversation-cache-sessions-dir",
                 "where named session saves are kept", "of its 2 MiB budget (--conversation-cache-sessions-mib)",
                 "DELETE /v1/sessions/NAME", "--conversation-cache-sessions-when-full evict"):
        assert part in said, said
    assert sorted(os.listdir(folders["sessions"])) == files   # nothing written, nothing deleted
    assert folder_bytes(folders["sessions"]) <= 2 * MIB
    assert cache.sessions.refusals == 1 and cache.sessions.evictions == 0
    assert [s["name"] for s in cache.list_sessions()] == ["a", "b"]
    assert cache.restore_session("a", 0).n_tokens == 50
    # a save under a saved name replaces it: its bytes are counted as gone
    assert save_history(cache, "b", 4)["n_tokens"] == 50
    # and one larger than the whole budget says so
    with pytest.raises(SessionsFolderFullError, match="larger than the whole budget"):
        save_history(cache, "big", 5, 200)
    assert folder_bytes(folders["sessions"]) <= 2 * MIB


def test_refused_over_http_is_a_507_storage_error(make_cache):
    cache = make_cache(conversation_cache_sessions_mib=1)
    cache.engine.prefill(1, history(1, 50))
    (s1, _), (s2, body), (s3, listed) = run_http(cache, [("POST", "/v1/sessions/a/save", {"slot": 1}),
                                                         ("POST", "/v1/sessions/b/save", {"slot": 1}),
                                                         ("GET", "/v1/sessions", None)])
    assert (s1, s2) == (200, 507)
    assert body["error"]["type"] == "storage_error", body
    assert body["error"]["message"].startswith("session 'b' not saved: the sessions folder "), body
    assert "--conversation-cache-sessions-mib" in body["error"]["message"]
    assert [s["name"] for s in listed["data"]] == ["a"]


def test_evict_drops_the_least_recently_used_saves(make_cache, folders):
    cache = make_cache(conversation_cache_sessions_mib=2, conversation_cache_sessions_when_full="evict")
    save_history(cache, "a", 1)
    save_history(cache, "b", 2)
    assert cache.restore_session("a", 0).n_tokens == 50   # used since b was saved: b is the least recently used
    save_history(cache, "c", 3)
    assert [s["name"] for s in cache.list_sessions()] == ["a", "c"]
    assert cache.sessions.evictions == 1 and cache.sessions.refusals == 0
    assert folder_bytes(folders["sessions"]) <= 2 * MIB
    tag = model_tag(cache.identity)
    assert not any(n.startswith(f"strata-session-b~{tag}") for n in os.listdir(folders["sessions"]))
    # nothing of this model's left to drop beside a save as large as the budget allows: refused, nothing deleted
    with pytest.raises(SessionsFolderFullError, match="larger than the whole budget"):
        save_history(cache, "big", 5, 200)
    assert [s["name"] for s in cache.list_sessions()] == ["a", "c"]


def test_damaged_file_is_skipped_counted_and_its_bytes_count(make_cache, folders):
    cache = make_cache(conversation_cache_sessions_mib=2, conversation_cache_sessions_when_full="evict")
    save_history(cache, "a", 1)
    tag = model_tag(cache.identity)
    damaged = folders["sessions"] / f"strata-session-junk~{tag}.json"
    damaged.write_bytes(b"{not json" + b" " * (1400 << 10))   # 1.4 MiB a save cannot delete
    again = make_cache(conversation_cache_sessions_mib=2, conversation_cache_sessions_when_full="evict")
    assert again.sessions.used_bytes == folder_bytes(folders["sessions"])
    assert [s["name"] for s in again.list_sessions()] == ["a"]
    assert again.sessions.level.skipped["damaged"] == 1
    assert 'strata_cache_skipped_files_total{level="sessions",reason="damaged"} 1' in again.metrics_text()
    # a ~0.8 MiB save fits only with a dropped and the damaged file gone: a is dropped, still short: refused
    with pytest.raises(SessionsFolderFullError, match="not this model's sessions hold the rest"):
        save_history(again, "b", 2)
    assert [s["name"] for s in again.list_sessions()] == ["a"] and damaged.exists()


def test_a_restart_measures_the_same_use_and_shows_it(make_cache, folders):
    cache = make_cache(conversation_cache_sessions_mib=2)
    save_history(cache, "a", 1)
    used = folder_bytes(folders["sessions"])
    assert cache.sessions.used_bytes == used
    again = make_cache(conversation_cache_sessions_mib=2)   # before any session call: measured, not indexed
    assert again.sessions.level.state == "closed" and again.sessions.used_bytes == used
    line = again.describe()
    assert line.endswith(f"; sessions {folders['sessions']} {used / MIB:.1f} of 2 MiB (reject when full)"), line
    text = again.metrics_text()
    assert f"strata_cache_sessions_folder_bytes {used}" in text
    assert f"strata_cache_sessions_budget_bytes {2 * MIB}" in text
    snap = again.snapshot_for_monitor()["sessions_folder"]
    assert (snap["used_mib"], snap["budget_mib"], snap["when_full"]) == (round(used / MIB, 1), 2, "reject")
    unlimited = make_cache()
    assert unlimited.describe().endswith(f"; sessions {folders['sessions']} {used / MIB:.1f} MiB used, no limit")
    # a DELETE gives its bytes back
    assert again.delete_session("a") and again.sessions.used_bytes == 0 == folder_bytes(folders["sessions"])
