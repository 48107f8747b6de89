"""Session names that differ only in case ('Work' and 'work'): on Windows and macOS they name the same files, so two
agents saving them overwrote each other's session and a DELETE of one removed the other's files. Names must differ
in more than case, on every OS (the same answers everywhere): a save under a case twin of a saved session is a 409,
a restore or DELETE names a session exactly (another case is a 404 that names the saved one, and touches nothing).
Real files on Linux (a file system that tells case apart: the rule does not depend on it). Not here: the rest of
the sessions (test_sessions.py)."""

from __future__ import annotations

import json
import os

import pytest
from strata.server.cache.sessions import SessionConflictError

from tests.cache.conftest import history, saved_before_models
from tests.cache.test_sessions import run_http


def _files(folder) -> dict[str, bytes]:
    return {n: (folder / n).read_bytes() for n in sorted(os.listdir(folder))}


def test_a_save_under_a_case_twin_of_a_saved_session_is_refused(make_cache, folders):
    cache = make_cache()
    eng = cache.engine
    first, second = history(1, 40), history(2, 60)
    eng.prefill(1, first)
    cache.save_session("Agent", 1)
    before = _files(folders["sessions"])
    eng.prefill(2, second)
    with pytest.raises(SessionConflictError, match="'agent' differs only in case from the saved session 'Agent'"):
        cache.save_session("agent", 2)
    assert _files(folders["sessions"]) == before                     # nothing written
    assert [s["name"] for s in cache.list_sessions()] == ["Agent"]
    assert cache.restore_session("Agent", 0).n_tokens == 40 and eng.context_tokens(0) == first
    cache.save_session("Agent", 2)                                   # its own name: saved again
    assert cache.restore_session("Agent", 0).n_tokens == 60


def test_restore_and_delete_name_a_session_exactly(make_cache, folders):
    cache = make_cache()
    cache.engine.prefill(1, history(1, 40))
    cache.save_session("Work", 1)
    before = _files(folders["sessions"])
    with pytest.raises(KeyError, match="one named 'Work' is saved"):
        cache.restore_session("work", 0)
    assert cache.delete_session("work") is False
    assert _files(folders["sessions"]) == before                     # the other case's files untouched
    assert cache.delete_session("Work") is True and os.listdir(folders["sessions"]) == []


def test_over_http_a_twin_is_a_409_and_a_404(make_cache):
    cache = make_cache()
    cache.engine.prefill(1, history(4, 30))
    res = run_http(cache, [
        ("POST", "/v1/sessions/Work/save", {"slot": 1}),
        ("POST", "/v1/sessions/work/save", {"slot": 1}),
        ("POST", "/v1/sessions/WORK/restore", {"slot": "main"}),
        ("DELETE", "/v1/sessions/work", None),
        ("GET", "/v1/sessions", None),
    ])
    assert [s for s, _ in res] == [200, 409, 404, 404, 200], res
    assert res[1][1]["error"]["type"] == "conflict_error" and "'Work'" in res[1][1]["error"]["message"]
    assert "one named 'Work' is saved" in res[2][1]["error"]["message"]
    assert [s["name"] for s in res[4][1]["data"]] == ["Work"]


def test_a_twin_of_a_session_an_older_strata_saved_is_refused_and_its_delete_touches_nothing(make_cache, folders):
    """A session an older Strata saved is not an entry (it is rebuilt when restored, and saved again under its own
    name): a save or DELETE of its case twin while it waits for that (or while it is rebuilt) must not reach it."""
    cache = make_cache()
    cache.engine.prefill(1, history(3, 40))
    cache.save_session("work", 1)
    cache.close(persist=False)
    saved_before_models(folders["sessions"], "work")
    sidecar = folders["sessions"] / "strata-session-work.json"
    d = json.loads(sidecar.read_text())
    d.pop("kv_revision")                                             # as an older Strata wrote it
    sidecar.write_text(json.dumps(d))
    cache = make_cache()
    assert [(s["name"], s["needs_rebuild"]) for s in cache.list_sessions()] == [("work", True)]
    before = _files(folders["sessions"])
    cache.engine.prefill(2, history(5, 50))
    with pytest.raises(SessionConflictError):
        cache.save_session("Work", 2)
    assert cache.delete_session("Work") is False
    assert _files(folders["sessions"]) == before
    assert cache.session_to_rebuild("work") is not None
    cache.save_session("work", 2)                                    # the rebuild's save: its own name
    assert [(s["name"], s["needs_rebuild"]) for s in cache.list_sessions()] == [("work", False)]
    key = cache.sessions.key_of("work")
    assert sorted(n.split("@")[0] for n in os.listdir(folders["sessions"])) == [
        f"strata-session-{key}", f"strata-session-{key}.json"]       # the older files went after its own save


def test_two_twins_an_older_strata_saved_on_linux_stay_two_sessions(make_cache, folders):
    """Saved before the rule, on a file system that tells case apart: each is still reached by its exact name."""
    cache = make_cache()
    cache.engine.prefill(1, history(1, 40))
    cache.save_session("Agent", 1)
    cache.close(persist=False)
    folder = folders["sessions"]
    saved_before_models(folder, "Agent")
    for n in os.listdir(folder):                                     # 'agent' beside it, as an older Strata wrote it
        raw = (folder / n).read_bytes()
        if n.endswith(".json"):
            d = json.loads(raw)
            d["key"], d["image"] = "agent", d["image"].replace("Agent", "agent")
            raw = json.dumps(d).encode()
        (folder / n.replace("Agent", "agent")).write_bytes(raw)
    cache = make_cache()
    assert [s["name"] for s in cache.list_sessions()] == ["Agent", "agent"]
    cache.engine.prefill(2, history(2, 60))
    cache.save_session("agent", 2)                                   # its own files: allowed
    assert cache.restore_session("agent", 0).n_tokens == 60 and cache.restore_session("Agent", 1).n_tokens == 40
