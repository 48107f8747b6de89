"""A named session an older Strata saved, restored by today's server: rebuilt from its token ids, not refused.

The sessions are a real server's; "older" is made as an upgrade makes it: each sidecar's kv_revision set to
KV_REVISION - 1, so its image is, from this engine's point of view, what an older engine computed. Today's
server (a second one on the same folder, as after an upgrade) lists them as needing a rebuild, reads their
tokens again into the context on a restore, and saves them again under their names with today's revision. A
sidecar whose tokens do not check stays refused (never trusted), and one longer than the context is a 400."""

from __future__ import annotations

import json
import logging
import threading
import time

import httpx2 as httpx
import numpy as np
from strata.engine import Engine
from strata.engine.snapshot import KV_REVISION
from strata.server import stop_progress

from tests.cache.conftest import saved_before_models
from tests.server.live import LiveServer
from tests.server.sched_stress import Pause
from tests.server.test_cache_and_policy import complete, ids

PREFIX = "strata-session-"


def _server(tiny_model, tmp_path) -> LiveServer:
    return LiveServer(model=str(tiny_model), ctx=2048, batch=1, slot_ctx=512, threads=1, conversation_cache_mib=16,
                      conversation_cache_park_min_free_mib=0, conversation_cache_min_free_mib=0,
                      conversation_cache_sessions_dir=str(tmp_path / "sessions"))


def _sidecar(tmp_path, name: str):
    """Session `name`'s sidecar: the model's own save's, else the one an older Strata (before per-model sessions)
    wrote."""
    folder = tmp_path / "sessions"
    own = sorted(folder.glob(f"{PREFIX}{name}~*.json"))
    return own[0] if own else folder / f"{PREFIX}{name}.json"


def _rewrite(tmp_path, name: str, change) -> dict:
    path = _sidecar(tmp_path, name)
    d = json.loads(path.read_text())
    change(d)
    path.write_text(json.dumps(d, separators=(",", ":")))
    return d


def _as_an_older_strata_saved_it(d: dict) -> None:
    d["kv_revision"] = KV_REVISION - 1


def _make_older(tmp_path, name: str) -> None:
    """Session `name` as an older Strata wrote it: under the name alone (before per-model sessions), its KV revision
    below this engine's."""
    saved_before_models(tmp_path / "sessions", name)
    _rewrite(tmp_path, name, _as_an_older_strata_saved_it)


def _save(url: str, name: str, slot="main") -> None:
    r = httpx.post(f"{url}/v1/sessions/{name}/save", json={"slot": slot}, timeout=60)
    assert r.status_code == 200, r.text


def _saved_by_an_older_strata(tiny_model, tmp_path) -> None:
    """Sessions `work` and `today` (one history), `broken` (its tokens then changed, their hash not), `big` (700
    tokens, more than slot 1 holds); all but `today` made an older Strata's."""
    with _server(tiny_model, tmp_path) as s:
        complete(s.url, ids(300, 61))
        for name in ("work", "today", "broken"):
            _save(s.url, name)
        complete(s.url, ids(700, 62))
        _save(s.url, "big")
    for name in ("work", "broken", "big"):
        _make_older(tmp_path, name)
    _rewrite(tmp_path, "broken", lambda d: d["tokens"].__setitem__(5, d["tokens"][5] % 400 + 1))


def _on_worker(s: LiveServer, fn):
    return s.state.scheduler.call(fn).result(60)


def _greedy(engine: Engine, tokens: list[int], n: int, chunk: int) -> tuple[np.ndarray, list[int]]:
    """A fresh read of `tokens` in context 0 (in pieces of `chunk`, as the server reads them): its logits, then
    `n` tokens at temperature 0."""
    for i in range(0, len(tokens), chunk):
        engine.prefill(0, tokens[i:i + chunk], chunk=chunk)
    first = np.array(engine.logits(0), dtype=np.float32)
    out = [int(np.argmax(first))]
    while len(out) < n:
        out.append(int(np.argmax(np.asarray(engine.decode([0], [out[-1]])[0]))))
    return first, out


def test_an_older_strata_s_session_is_rebuilt_from_its_tokens_and_saved_again(tiny_model, tmp_path):
    _saved_by_an_older_strata(tiny_model, tmp_path)
    work = json.loads(_sidecar(tmp_path, "work").read_text())["tokens"]
    with _server(tiny_model, tmp_path) as s:
        listed = {x["name"]: x for x in httpx.get(s.url + "/v1/sessions").json()["data"]}
        assert {k: v["needs_rebuild"] for k, v in listed.items()} == {"big": True, "today": False, "work": True}
        assert listed["work"]["n_tokens"] == len(work)

        r = httpx.post(s.url + "/v1/sessions/work/restore", json={"slot": "main"}, timeout=120)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["rebuilt"] is True and body["tokens_read"] == len(work) == body["n_tokens"], body
        assert body["saved_again"] is True and body["save_error"] is None, body
        engine, sched = s.state.engine, s.state.scheduler
        assert _on_worker(s, lambda: list(engine.context_tokens(0))) == work        # exactly its tokens
        rebuilt_logits = _on_worker(s, lambda: np.array(engine.logits(0), dtype=np.float32))
        slots = {x["id"]: x for x in httpx.get(s.url + "/v1/slots").json()["slots"]}
        main = slots.get(0, slots.get("main"))
        assert main["tokens"] == len(work) and main["conversation"] == "session:work", main

        # saved again with today's revision: listed as a plain session, and the next restore is a plain one
        assert json.loads(_sidecar(tmp_path, "work").read_text())["kv_revision"] == KV_REVISION
        listed = {x["name"]: x["needs_rebuild"] for x in httpx.get(s.url + "/v1/sessions").json()["data"]}
        assert listed == {"big": True, "today": False, "work": False}
        again = httpx.post(s.url + "/v1/sessions/work/restore", json={"slot": 1}, timeout=120).json()
        assert again["rebuilt"] is False and again["n_tokens"] == len(work), again

        # the next request continuing it reuses the rebuilt tokens and answers as a fresh read does
        more = ids(6, 63)
        r = httpx.post(s.url + "/v1/completions", json={"prompt": work + more, "max_tokens": 5, "temperature": 0,
                                                        "ignore_eos": True}, timeout=120).json()
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= len(work), r["usage"]
        chunk = sched.chunk
        answer = r["choices"][0]["text"]
    fresh = Engine(str(tiny_model), n_ctx=2048, n_threads=1, kv_type=s.config.kv_type,
                   max_chunk=s.config.prefill_chunk)
    fresh_logits, _ = _greedy(fresh, work, 1, chunk)
    assert np.array_equal(rebuilt_logits, fresh_logits), np.abs(rebuilt_logits - fresh_logits).max()
    fresh.truncate(0, 0)
    _, continued = _greedy(fresh, work + more, 5, chunk)
    assert answer == fresh.detokenize(continued), (answer, continued)


def test_a_damaged_or_too_long_older_session_is_refused_and_left_as_it_was(tiny_model, tmp_path):
    _saved_by_an_older_strata(tiny_model, tmp_path)
    files = {p.name: p.read_bytes() for p in (tmp_path / "sessions").iterdir()}
    n_big = len(json.loads(_sidecar(tmp_path, "big").read_text())["tokens"])     # its 700 and what was answered
    with _server(tiny_model, tmp_path) as s:
        complete(s.url, ids(200, 64))                   # main holds a conversation a refusal must not touch
        held = _on_worker(s, lambda: list(s.state.engine.context_tokens(0)))

        r = httpx.post(s.url + "/v1/sessions/broken/restore", json={"slot": "main"}, timeout=60)
        assert r.status_code == 409 and r.json()["error"]["type"] == "restore_error", r.text
        assert "damaged" in r.json()["error"]["message"] and "token hash mismatch" in r.json()["error"]["message"]

        r = httpx.post(s.url + "/v1/sessions/big/restore", json={"slot": 1}, timeout=60)
        assert r.status_code == 400, r.text
        assert f"holds {n_big} tokens" in r.json()["error"]["message"] and "(512)" in r.json()["error"]["message"], r.text

        assert _on_worker(s, lambda: list(s.state.engine.context_tokens(0))) == held
        assert "broken" not in [x["name"] for x in httpx.get(s.url + "/v1/sessions").json()["data"]]
        # DELETE still removes one
        assert httpx.delete(s.url + "/v1/sessions/broken").status_code == 200
        # the too-long one reads whole into main, which holds it
        r = httpx.post(s.url + "/v1/sessions/big/restore", json={"slot": "main"}, timeout=120)
        assert r.status_code == 200 and r.json()["rebuilt"] is True, r.text
    after = {p.name: p.read_bytes() for p in (tmp_path / "sessions").iterdir()}
    assert not any(n.startswith(PREFIX + "broken") for n in after)
    kept = [n for n in files if n.startswith((f"{PREFIX}work.", f"{PREFIX}work@", f"{PREFIX}today~"))]
    assert len(kept) == 4, kept                       # each one's sidecar and image
    for name in kept:
        assert after[name] == files[name], f"{name} changed"


def test_a_stop_during_a_rebuild_waits_for_the_piece_as_for_a_prompt_s(tiny_model, tmp_path, caplog, monkeypatch):
    """The rebuild reads prompt pieces inside the restore's call: the stop waits for the piece under way by the
    measured rate (not the 2 minutes of a save or restore), says so as for a request's piece, and starts no
    piece after it; the session stays an older Strata's (not saved half read)."""
    monkeypatch.setattr(stop_progress, "STEP_WAIT_SLACK_S", 0.3)
    _saved_by_an_older_strata(tiny_model, tmp_path)
    answers: list = []
    with caplog.at_level(logging.INFO, logger="strata.server"):
        with _server(tiny_model, tmp_path) as s:
            sched = s.state.scheduler
            sched.chunk = 64                                  # several pieces for the 300 tokens
            with Pause(sched.engine, "prefill") as pause:
                restoring = threading.Thread(target=lambda: answers.append(httpx.post(
                    s.url + "/v1/sessions/work/restore", json={"slot": "main"}, timeout=60)), daemon=True)
                restoring.start()
                assert pause.entered.wait(60)
                sched.prefill_rate = 64.0                     # a slow machine's: ~3 s for the piece, +0.3
                stopper = threading.Thread(target=sched.stop, kwargs={"every_s": 0.2})
                stopper.start()
                time.sleep(1.0)
                pause.release.set()
                stopper.join(60)
                restoring.join(60)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopping: ")]
    assert any(line.startswith("stopping: finishing the prompt piece under way (64 tokens)") for line in lines), lines
    assert not any("has not ended after" in line for line in lines), lines
    assert answers and answers[0].status_code == 503, answers
    assert json.loads(_sidecar(tmp_path, "work").read_text())["kv_revision"] == KV_REVISION - 1
