"""A conversation cache folder an older Strata wrote, read by today's server after an upgrade.

Every sidecar before the engine's KV revision was recorded (server/cache/disk.py: `kv_revision`) is
today's minus that field: the files below are a real server's, with it taken out. Their KV was computed by
an older engine (RoPE, gating and scratch fixes since have changed the KV some models' tokens give), so
they are never restored: skipped, counted, removed (Strata's own files, no use to this version), and the
user told once per level, not per file. Another model's or KV type's files (a user who re-ran setup) are
left alone and said once too."""

from __future__ import annotations

import json

import httpx2 as httpx
import openai

from tests.cache.conftest import saved_before_models
from tests.server.live import LiveServer

SYSTEM = "You are a terse coding agent. " + "Keep every answer short. " * 30


def _server(tiny_model, folder, **flags) -> LiveServer:
    flags = {"batch": 3, **flags}
    return LiveServer(model=str(tiny_model), ctx=2048, slot_ctx=1024, threads=1,
                      conversation_cache_warm_dir=str(folder), conversation_cache_warm_mib=256, **flags)


def _turn(server: LiveServer, messages: list[dict]):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    return client.chat.completions.create(model="m", messages=messages, max_tokens=8, temperature=0,
                                          extra_body={"ignore_eos": True})


def _first_run(tiny_model, folder, n: int = 3) -> list[list[dict]]:
    """n conversations kept in `folder` by a real server's stop; their messages, for the next turn."""
    conversations = []
    with _server(tiny_model, folder) as server:
        for i in range(n):
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What does git {i} do?"}]
            answer = _turn(server, messages)
            conversations.append(messages + [{"role": "assistant", "content": answer.choices[0].message.content},
                                             {"role": "user", "content": "And git blame?"}])
    assert len(list(folder.glob("*.json"))) == n
    return conversations


def _as_an_older_version_wrote_them(folder) -> None:
    for sidecar in folder.glob("*.json"):
        d = json.loads(sidecar.read_text())
        d.pop("kv_revision", None)          # (absent before it was recorded)
        sidecar.write_text(json.dumps(d, separators=(",", ":")))


def _said(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_files_an_older_version_wrote_are_not_restored_but_removed_and_said_once(tiny_model, tmp_path, caplog):
    folder = tmp_path / "warm"
    conversations = _first_run(tiny_model, folder)
    _as_an_older_version_wrote_them(folder)
    with caplog.at_level("INFO", logger="strata.cache"):
        with _server(tiny_model, folder) as server:
            warm = server.state.cache.cascade.levels[1]
            assert not warm.entries and warm.skipped["stale"] == 3 and warm.removed["stale"] == 3
            again = _turn(server, conversations[0])
    assert again.usage.prompt_tokens_details.cached_tokens < 16, again.usage   # read afresh, not restored
    said = _said(caplog, "an older Strata")
    assert len(said) == 1, said                       # one line for the level, not one per file
    assert "3 entries" in said[0] and str(folder) in said[0] and "removed" in said[0], said
    assert not _said(caplog, "skipped " + str(folder))        # no per-file warning either
    assert len(list(folder.glob("*.json"))) == 1 == len(list(folder.glob("*.img")))   # only the new turn's


def test_files_of_today_are_restored(tiny_model, tmp_path):
    """The control: the same files left as today wrote them are restored (the test above can fail)."""
    folder = tmp_path / "warm"
    conversations = _first_run(tiny_model, folder, n=1)
    with _server(tiny_model, folder) as server:
        again = _turn(server, conversations[0])
    assert again.usage.prompt_tokens_details.cached_tokens >= 100, again.usage


def test_another_kv_type_is_left_alone_and_said_once(tiny_model_factory, tmp_path, caplog):
    tiny_model = tiny_model_factory(n_embd=128, n_ff=256)     # heads of 32: q8_0 KV takes them
    folder = tmp_path / "warm"
    conversations = _first_run(tiny_model, folder)
    theirs = sum(f.stat().st_size for f in folder.iterdir())
    with caplog.at_level("INFO", logger="strata.cache"):
        with _server(tiny_model, folder, kv_type="q8_0") as server:
            warm = server.state.cache.cascade.levels[1]
            assert not warm.entries and warm.skipped["foreign"] == 3 and not warm.removed
            again = _turn(server, conversations[0])
    assert again.usage.prompt_tokens_details.cached_tokens < 16, again.usage
    said = _said(caplog, "another model or KV layout")
    assert len(said) == 1 and "3 file(s)" in said[0] and "outside this level's budget" in said[0], said
    assert f"({theirs / 2**20:.1f} MiB" in said[0], (said, theirs)
    assert len(list(folder.glob("*.json"))) == 4          # theirs kept (a shared folder), and the new turn's


def test_another_kv_type_s_files_an_older_version_wrote_are_left_alone(tiny_model_factory, tmp_path):
    """The revision was checked before the identity: another model's or KV type's files an older Strata wrote
    in a shared folder were removed as stale, though the older server of that model may still be using them
    (docs/conversation-cache.md: another model's files are left alone). They are foreign: left, said once."""
    tiny_model = tiny_model_factory(n_embd=128, n_ff=256)     # heads of 32: q8_0 KV takes them
    folder = tmp_path / "warm"
    _first_run(tiny_model, folder)
    _as_an_older_version_wrote_them(folder)
    theirs = sorted(p.name for p in folder.iterdir())
    with _server(tiny_model, folder, kv_type="q8_0") as server:
        warm = server.state.cache.cascade.levels[1]
        assert warm.skipped["foreign"] == 3 and not warm.skipped["stale"] and not warm.removed, warm.skipped
    assert sorted(p.name for p in folder.iterdir()) == theirs


def test_a_session_an_older_version_saved_is_rebuilt_from_its_tokens_and_can_be_deleted(tiny_model, tmp_path):
    """A saved session is the user's: its files stay, it is listed as needing a rebuild, and a restore reads its
    tokens again (it was a 409 'save it again'; tests/server/test_session_rebuild.py has the rest), then a delete
    removes it. Its sidecar is one from before the revision was recorded (no kv_revision field)."""
    sessions = tmp_path / "sessions"
    with _server(tiny_model, tmp_path / "warm", conversation_cache_sessions_dir=str(sessions)) as server:
        _turn(server, [{"role": "user", "content": "What does git bisect do?"}])
        slot = next(s["id"] for s in httpx.get(server.url + "/v1/slots").json()["slots"] if s["tokens"])
        assert httpx.post(server.url + "/v1/sessions/work/save", json={"slot": slot}).status_code == 200
    saved_before_models(sessions, "work")
    _as_an_older_version_wrote_them(sessions)
    with _server(tiny_model, tmp_path / "warm", conversation_cache_sessions_dir=str(sessions)) as server:
        listed = httpx.get(server.url + "/v1/sessions").json()["data"]
        assert [(x["name"], x["needs_rebuild"]) for x in listed] == [("work", True)], listed
        r = httpx.post(server.url + "/v1/sessions/work/restore", json={"slot": "main"})
        assert r.status_code == 200 and r.json()["rebuilt"] is True, r.text
        assert r.json()["tokens_read"] == listed[0]["n_tokens"], r.text
        assert len(list(sessions.glob("strata-session-work~*"))) == 2          # saved again under its name
        assert not list(sessions.glob("strata-session-work[.@]*"))             # the older files replaced
        assert httpx.delete(server.url + "/v1/sessions/work").status_code == 200
        assert not list(sessions.glob("strata-session-work*"))
