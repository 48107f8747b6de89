"""Named sessions: validated names, save/restore/delete/list through the one placement function,
and the HTTP routes the server mounts."""

from __future__ import annotations

import asyncio
import os
import re

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from strata.server.cache.http import SESSION_BACKEND, add_session_routes
from strata.server.cache.memory import FixedMemory
from strata.server.cache.session_store import model_tag
from strata.server.cache.sessions import SessionNameError, validate_session_name

from tests.cache.conftest import history

from .test_park_restore import fresh_continuation


@pytest.mark.parametrize("bad", ["", "..", "../x", "a/b", "a\\b", ".hidden", "x" * 101, "a..b", "name.tmp",
                                 "nul\x00", "sp ace", 7, None])
def test_bad_names_are_refused(bad):
    with pytest.raises(SessionNameError, match="invalid session name"):
        validate_session_name(bad)


# Names Windows cannot hold in a file name are refused on every OS, so a folder saved on Linux is valid on Windows:
# its reserved characters, control characters (a last newline matched `$`: 'work\n' was valid), a last dot or space
# (Windows drops them: 'work.' and 'work' would be one file).
@pytest.mark.parametrize("bad", [*'<>:"|?*', "a<b", "a:b", "a|b", "a?", "a*", 'a"b', "work\n", "work\r\n", "\nwork",
                                 "a\tb", "work\x1f", "work.", "work ", " work", "wörk"])
def test_names_windows_cannot_hold_are_refused_on_every_os(bad):
    with pytest.raises(SessionNameError, match="invalid session name"):
        validate_session_name(bad)


WINDOWS_RESERVED_STEMS = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)),
                          *(f"LPT{i}" for i in range(1, 10))}


def _windows_file_name_problem(file_name: str) -> str | None:
    """Why Windows refuses `file_name` as a file name (None when it takes it): its rules, written down here."""
    if any(c in '<>:"/\\|?*' or ord(c) < 32 for c in file_name):
        return "a reserved or control character"
    if file_name.endswith((".", " ")):
        return "a last dot or space"
    if file_name.split(".", 1)[0].rstrip(" ").upper() in WINDOWS_RESERVED_STEMS:
        return "a device name"
    if len(file_name) > 255:
        return "longer than 255"
    return None


# Device names are valid session names: the files are `strata-session-CON.json`, whose stem is no device name.
@pytest.mark.parametrize("good", ["a", "agent-1", "proj_2.main", "X" * 100, "CON", "nul", "Com1", "LPT9", "aux.x",
                                  "a.b.c", "-x", "_"])
def test_good_names(good, tmp_path):
    assert validate_session_name(good) == good
    from strata.server.cache.disk import GENERATION_MARK
    from strata.server.cache.session_store import MODEL_MARK
    from strata.server.cache.sessions import SESSION_PREFIX
    from strata.server.cache.temp_files import temp_name
    for key in (good, f"{good}{MODEL_MARK}{'0' * 8}"):   # saved before sessions were per model, and a model's own
        for file_name in (f"{SESSION_PREFIX}{key}.json", f"{SESSION_PREFIX}{key}{GENERATION_MARK}{'0' * 16}.img"):
            assert _windows_file_name_problem(file_name) is None, file_name
            assert _windows_file_name_problem(os.path.basename(temp_name(str(tmp_path / file_name)))) is None


def test_save_restore_delete_list(make_cache, folders):
    cache = make_cache()
    eng = cache.engine
    h = history(1, 50)
    eng.prefill(1, h)
    info = cache.save_session("agent-1", 1)
    assert info["n_tokens"] == 50 and info["floor"] == "parking"
    sidecar, image = sorted(os.listdir(folders["sessions"]))   # each save's image under a name of its own
    tag = model_tag(cache.identity)                              # the model's mark: sessions are per model
    assert re.fullmatch(rf"strata-session-agent-1~{tag}@[0-9a-f]{{16}}\.img", image)
    assert sidecar == f"strata-session-agent-1~{tag}.json" and re.fullmatch("[0-9a-f]{8}", tag)
    assert [s["name"] for s in cache.list_sessions()] == ["agent-1"]
    res = cache.restore_session("agent-1", 2)
    assert res.n_tokens == 50 and eng.context_tokens(2) == h
    prompt = h + [1, 3]
    assert eng.continue_greedy(2, prompt, 5) == fresh_continuation(prompt)
    assert cache.admissions[("parking", "session_save")] == 1
    assert cache.admissions[("parking", "session_restore")] == 1
    assert cache.delete_session("agent-1") is True and cache.list_sessions() == []
    assert cache.delete_session("agent-1") is False
    with pytest.raises(KeyError):
        cache.restore_session("agent-1", 2)


def test_session_save_under_the_transient_floor_and_refused(make_cache):
    mem = FixedMemory(100_000)
    cache = make_cache(memory=mem)
    cache.engine.prefill(1, history(2))
    mem.value = 2000
    assert cache.save_session("s", 1)["floor"] == "transient"
    mem.value = 10
    with pytest.raises(MemoryError, match="session_save refused"):
        cache.save_session("s2", 1)


def test_sessions_survive_restart(make_cache):
    cache = make_cache()
    cache.engine.prefill(1, history(3))
    cache.save_session("keep", 1)
    again = make_cache()
    assert again.restore_session("keep", 0).n_tokens == len(history(3))


def run_http(cache, calls):
    async def go():
        app = web.Application()
        app[SESSION_BACKEND] = cache
        add_session_routes(app)
        async with TestClient(TestServer(app)) as client:
            out = []
            for method, path, body in calls:
                r = await client.request(method, path, json=body)
                out.append((r.status, await r.json()))
            return out
    return asyncio.run(go())


def test_http_routes(make_cache):
    cache = make_cache()
    cache.engine.prefill(1, history(4, 30))
    res = run_http(cache, [
        ("POST", "/v1/sessions/work/save", {"slot": 1}),
        ("GET", "/v1/sessions", None),
        ("POST", "/v1/sessions/work/restore", {"slot": "main"}),
        ("POST", "/v1/sessions/missing/restore", None),
        ("POST", "/v1/sessions/..%2Fetc/save", {"slot": 1}),
        ("POST", "/v1/sessions/work/save", {"slot": -3}),
        ("POST", "/v1/sessions/work/save", {"slot": 99}),
        ("DELETE", "/v1/sessions/work", None),
        ("DELETE", "/v1/sessions/work", None),
    ])
    codes = [s for s, _ in res]
    assert codes == [200, 200, 200, 404, 400, 400, 400, 200, 404]
    assert res[0][1]["n_tokens"] == 30
    assert res[1][1]["data"][0]["name"] == "work"
    assert res[2][1]["n_tokens"] == 30 and cache.engine.context_len(0) == 30
    assert "invalid session name" in res[4][1]["error"]["message"]
    assert "slot" in res[5][1]["error"]["message"]
    assert "context" in res[6][1]["error"]["message"]
    for status, body in res:   # errors in the shape every other endpoint uses
        if status >= 400:
            assert set(body["error"]) == {"message", "type", "param", "code"}


def test_deleting_a_session_in_a_read_only_folder_says_so_and_keeps_it(make_cache, folders):
    """DELETE /v1/sessions/NAME where the folder cannot be written (a read-only mount, its permissions):
    the removal's OSError escaped the route, a bare 500 'Internal Server Error' (no error object), and
    the session vanished from the list while its files stayed (it came back at the next start). Now a
    507 storage_error that says why, as a save there gets, and the session is still listed."""
    from .test_read_only_folder import read_only

    cache = make_cache()
    cache.engine.prefill(1, history(5, 30))
    cache.save_session("kept", 1)
    with read_only(folders["sessions"]):
        async def go():
            app = web.Application()
            app[SESSION_BACKEND] = cache
            add_session_routes(app)
            async with TestClient(TestServer(app)) as client:
                r = await client.delete("/v1/sessions/kept")
                listed = await (await client.get("/v1/sessions")).json()
                return r.status, r.headers.get("Content-Type", ""), await r.text(), listed
        status, kind, text, listed = asyncio.run(go())
    assert status == 507 and kind.startswith("application/json"), (status, text)
    assert "could not delete the session" in text and "Read-only file system" in text
    assert [s["name"] for s in listed["data"]] == ["kept"]
