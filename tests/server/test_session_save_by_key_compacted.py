"""A session saved by conversation key after the conversation was compacted and both its histories were parked
(review of 806e04d): the key's entries went different ways (the history from before the compaction, longer, and
the compacted one, parked last), and the longest was saved: the conversation as it was before its compaction.
The entry parked last is the conversation now. A real server on a tiny scripted model, the client naming its
conversation (`prompt_cache_key`, as Codex does: a compaction keeps it)."""

from __future__ import annotations

import httpx2 as httpx

from tests.server import test_session_save_by_conversation as by_conversation
from tests.server.test_session_save_by_conversation import WORDS, _other_request, _save, _server, _tokens

answering_model = by_conversation.answering_model   # its fixture: a tiny model that answers every prompt alike

SESSION = "codex-session-1"


def _turn(url: str, user: str) -> None:
    r = httpx.post(url + "/v1/chat/completions", json={
        "messages": [{"role": "system", "content": "You review code."}, {"role": "user", "content": user}],
        "max_tokens": 16, "temperature": 0, "prompt_cache_key": SESSION}, timeout=120)
    assert r.status_code == 200, r.text


def _key_of_main(url: str) -> str:
    return httpx.get(url + "/v1/slots", timeout=30).json()["slots"][0]["conversation"]


def test_a_compacted_conversation_parked_last_is_the_one_saved_by_its_key(answering_model, tmp_path):
    with _server(answering_model, tmp_path) as s:
        _turn(s.url, " ".join(WORDS * 20))                          # the long history, before its compaction
        before, key = _tokens(s, 0), _key_of_main(s.url)
        _other_request(s.url)                                       # parked to the cache (it fits no slot)
        _turn(s.url, "Summary of the work so far: " + " ".join(reversed(WORDS * 11)))   # compacted: shorter
        compacted = _tokens(s, 0)
        assert _key_of_main(s.url) == key and 512 < len(compacted) < len(before)
        assert compacted[:20] == before[:20] and compacted != before[:len(compacted)]   # went another way
        _other_request(s.url)                                       # parked too: no context holds the key
        r = _save(s.url, "by-key", {"conversation": key})
        assert r.status_code == 200, r.text
        body = r.json()
        # before: the history from before the compaction, n_tokens == len(before)
        assert (body["source"], body["n_tokens"]) == ("ram", len(compacted)), body
        _other_request(s.url)
        r = httpx.post(s.url + "/v1/sessions/by-key/restore", json={"slot": "main"}, timeout=120)
        assert r.status_code == 200 and _tokens(s, 0) == compacted, r.text
