"""A save by conversation that the sessions folder's budget refuses changes nothing. A history parked to the
conversation cache is read back into an idle context before it is saved (history_save._read_back); the budget
(--conversation-cache-sessions-mib, when full: reject) was weighed only by the save itself, after the read back, so
a 507 had still parked and overwritten what that context held. Now the budget is weighed before the read back.
Real servers on a tiny scripted model."""

from __future__ import annotations

import httpx2 as httpx

from tests.server import test_session_save_by_conversation as by_conversation
from tests.server.live import LiveServer
from tests.server.test_session_save_by_conversation import (
    _conversation,
    _other_request,
    _save,
    _sessions,
    _tokens,
)

answering_model = by_conversation.answering_model   # its fixture: a tiny model that answers every prompt alike


def _server(model, tmp_path) -> LiveServer:
    # as test_session_save_by_conversation's (main 2,048 tokens, one slot of 512), the sessions folder 1 MiB
    return LiveServer(model=str(model), ctx=2048, batch=1, slot_ctx=512, threads=1, conversation_cache_mib=16,
                      conversation_cache_park_min_free_mib=0, conversation_cache_min_free_mib=0,
                      conversation_cache_sessions_dir=str(tmp_path / "sessions"), conversation_cache_sessions_mib=1)


def test_a_save_the_budget_refuses_leaves_the_idle_context_as_it_was(answering_model, tmp_path):
    with _server(answering_model, tmp_path) as s:
        history, _ = _conversation(s.url, 120)
        held = _tokens(s, 0)
        assert len(held) > 512                          # does not fit the slot: parked to the cache when displaced
        # the folder filled with saves of this history until the budget refuses one more of its size
        for i in range(50):
            r = _save(s.url, f"fill-{i}", {"slot": "main"})
            if r.status_code != 200:
                break
        assert r.status_code == 507, r.text
        saved = _sessions(s.url)
        key = httpx.get(s.url + "/v1/slots", timeout=30).json()["slots"][0]["conversation"]
        _other_request(s.url)                           # main now holds another request's history
        other = _tokens(s, 0)
        assert other != held
        for body in ({"messages": history}, {"tokens": held}, {"conversation": key}):
            r = _save(s.url, "work", body)
            assert r.status_code == 507, (body, r.text)
            err = r.json()["error"]
            assert err["type"] == "storage_error" and "--conversation-cache-sessions-mib" in err["message"], err
            # before: main held the parked history, read back for the save (the other request's parked and gone)
            assert _tokens(s, 0) == other, body
            assert _sessions(s.url) == saved
