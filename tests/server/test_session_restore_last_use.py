"""A session restored into a slot is that slot's latest use: /v1/slots and the slot policy see the restore's time,
not the time the slot's earlier occupant was last used. Kept, that older time made the restored history look idle
since long before (expired, the first a new conversation overwrote) right after the client asked for it back.
Real server on a tiny scripted model, real session files."""

from __future__ import annotations

import time

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer, scripted_model


@pytest.fixture(scope="module")
def answering_model(tiny_model_factory):
    return scripted_model(tiny_model_factory, "Done.", ctx_len=4096, n_vocab=512, seed=3)


def _chat(url: str, text: str) -> None:
    r = httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": text}],
                                                       "max_tokens": 8, "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text


def _slot(url: str, ctx) -> dict:
    slots = httpx.get(url + "/v1/slots", timeout=30).json()["slots"]
    return next(s for s in slots if s["id"] == ctx)     # fields that are None are left out


@pytest.mark.parametrize("into", ["main", 1])
def test_a_restore_is_the_contexts_latest_use(answering_model, tmp_path, into):
    """Into main (its last use the chat's end, 1.5 s before) and into a slot never used (none)."""
    with LiveServer(model=str(answering_model), ctx=2048, batch=1, slot_ctx=2048, threads=1,
                    conversation_cache_mib=16, conversation_cache_park_min_free_mib=0,
                    conversation_cache_min_free_mib=0,
                    conversation_cache_sessions_dir=str(tmp_path / "sessions")) as s:
        _chat(s.url, "a conversation to keep " * 20)       # alone: it runs in main
        r = httpx.post(f"{s.url}/v1/sessions/kept/save", json={"slot": "main"}, timeout=120)
        assert r.status_code == 200, r.text
        before = _slot(s.url, into).get("last_use")
        assert (before is None) == (into == 1)
        time.sleep(1.5)
        restored_at = time.time()
        r = httpx.post(f"{s.url}/v1/sessions/kept/restore", json={"slot": into}, timeout=120)
        assert r.status_code == 200, r.text
        after = _slot(s.url, into)
        assert after["conversation"] == "session:kept"
        assert after.get("last_use", 0.0) >= restored_at - 0.5, (before, restored_at, after)
