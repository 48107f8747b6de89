"""Named sessions are per model. Users switch models (the app's wizard offers several); before, an agent saving
`work` under model B renamed B's sidecar over the `work` model A saved and removed A's image (A's restore then a
plain miss: the session lost), and B's DELETE of `work` removed A's files. Now each model's files carry its mark
(`strata-session-work~<tag>.json`): two models' sessions of one name are two sessions; a restore or DELETE of a name
only another model saved is a 409 naming that model, touching nothing; the list gives each session's model. A
session saved before (`strata-session-work.json`, as an older Strata writes it) stays readable by its model,
untouched by another, and is replaced by its model's next save of that name.

Real files in a shared folder, two caches over simulated engines of two models (their KV differs by model id)."""

from __future__ import annotations

import os

import pytest
from strata.server.cache.sessions import SessionOfAnotherModelError

from tests.cache.conftest import history, saved_before_models
from tests.cache.sim_engine import SimEngine
from tests.cache.test_sessions import run_http

FIRST, AGAIN, NEWER = history(1, 40), history(2, 56), history(3, 48)


def files(folder) -> dict[str, bytes]:
    return {n: (folder / n).read_bytes() for n in sorted(os.listdir(folder))}


def saved(make_cache, tokens, model_id: str = "sim-model-a", name: str = "work"):
    cache = make_cache(engine=SimEngine(model_id=model_id))
    cache.engine.prefill(1, tokens)
    cache.save_session(name, 1)
    return cache


def restores(cache, tokens, name: str = "work") -> bool:
    res = cache.restore_session(name, 0)
    return res.n_tokens == len(tokens) and cache.engine.context_tokens(0) == tokens


def test_two_models_sessions_of_one_name_are_two_sessions(make_cache, folders):
    a = saved(make_cache, FIRST)
    b = saved(make_cache, AGAIN, "sim-model-b")            # before: renamed over a's sidecar, a's image removed
    assert len(os.listdir(folders["sessions"])) == 4
    assert restores(a, FIRST) and restores(b, AGAIN)
    assert [(s["name"], s["model"], s["n_tokens"]) for s in a.list_sessions()] == [("work", "sim-model-a", 40)]
    assert [(s["name"], s["model"], s["n_tokens"]) for s in b.list_sessions()] == [("work", "sim-model-b", 56)]
    again = make_cache(engine=SimEngine(model_id="sim-model-a"))   # a restart of a's server
    assert restores(again, FIRST)
    assert b.delete_session("work") is True                # b's own
    assert restores(again, FIRST) and len(os.listdir(folders["sessions"])) == 2


def test_a_name_only_another_model_saved_is_a_409_naming_it_and_touches_nothing(make_cache, folders):
    saved(make_cache, FIRST)
    before = files(folders["sessions"])
    b = make_cache(engine=SimEngine(model_id="sim-model-b"))
    assert not b.has_session("work") and b.list_sessions() == []
    with pytest.raises(SessionOfAnotherModelError, match="saved by model 'sim-model-a'"):
        b.restore_session("work", 0)
    with pytest.raises(SessionOfAnotherModelError):
        b.delete_session("work")                           # before: a's files removed
    assert files(folders["sessions"]) == before
    res = run_http(b, [("POST", "/v1/sessions/work/restore", {"slot": "main"}), ("DELETE", "/v1/sessions/work", None),
                       ("POST", "/v1/sessions/other/restore", None), ("GET", "/v1/sessions", None)])
    assert [status for status, _ in res] == [409, 409, 404, 200], res
    for _, body in res[:2]:
        assert body["error"]["type"] == "conflict_error" and "'sim-model-a'" in body["error"]["message"], body
    assert res[3][1]["data"] == [] and files(folders["sessions"]) == before


def test_a_session_saved_before_models_had_their_own_is_read_by_its_model_and_replaced_by_its_next_save(
        make_cache, folders):
    saved(make_cache, FIRST).close(persist=False)
    saved_before_models(folders["sessions"], "work")     # strata-session-work.json, no model name recorded
    older = files(folders["sessions"])
    a = make_cache(engine=SimEngine(model_id="sim-model-a"))
    assert [(s["name"], s["model"]) for s in a.list_sessions()] == [("work", "sim-model-a")]
    assert restores(a, FIRST)
    b = make_cache(engine=SimEngine(model_id="sim-model-b"))
    with pytest.raises(SessionOfAnotherModelError, match=r"saved by another model \(model id sim-model-a\)"):
        b.restore_session("work", 0)
    with pytest.raises(SessionOfAnotherModelError):
        b.delete_session("work")
    b.engine.prefill(1, AGAIN)
    b.save_session("work", 1)                              # b's own beside it: a's older files untouched
    assert all(files(folders["sessions"])[n] == raw for n, raw in older.items())
    assert restores(a, FIRST) and restores(b, AGAIN)
    a.engine.prefill(1, NEWER)
    a.save_session("work", 1)                              # a's own save replaces its older one
    names = sorted(os.listdir(folders["sessions"]))
    assert not set(older) & set(names) and len(names) == 4, names
    assert restores(a, NEWER) and [s["n_tokens"] for s in a.list_sessions()] == [48]
    assert restores(make_cache(engine=SimEngine(model_id="sim-model-a")), NEWER)
    assert a.delete_session("work") is True and restores(b, AGAIN) and len(os.listdir(folders["sessions"])) == 2


def test_a_delete_of_a_session_saved_before_models_had_their_own_removes_it(make_cache, folders):
    saved(make_cache, FIRST).close(persist=False)
    saved_before_models(folders["sessions"], "work")
    a = make_cache(engine=SimEngine(model_id="sim-model-a"))
    assert a.delete_session("work") is True and os.listdir(folders["sessions"]) == []
    assert a.delete_session("work") is False
