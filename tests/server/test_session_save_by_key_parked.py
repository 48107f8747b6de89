"""A session saved by conversation key (`{"conversation": KEY}`) finds the conversation once it is parked: the
cache entry records the key its requests ran under (its sidecar's meta). Before, a key found only contexts, and a
parked conversation was a 404 saying to send the messages. Real servers on a tiny scripted model: the
conversation answered in main, another request takes main (the history parked to RAM, or to the cold level), the
save by key reads it back and saves it, and its restore answers the next turn from all of it. A cold sidecar
without the key (an older Strata's) still loads: found by the messages, not by the key."""

from __future__ import annotations

import json
import os

import httpx2 as httpx

from tests.server import test_session_save_by_conversation as by_conversation
from tests.server.live import LiveServer, cold_only
from tests.server.test_session_save_by_conversation import (
    _conversation,
    _other_request,
    _save,
    _server,
    _tokens,
    restored_into_main_and_continued,
)

answering_model = by_conversation.answering_model   # its fixture: a tiny model that answers every prompt alike


def _key_of_main(url: str) -> str:
    return httpx.get(url + "/v1/slots", timeout=30).json()["slots"][0]["conversation"]


def _saved_then_restored_answers_as_before(s: LiveServer, key: str, history: list[dict], held: list[int],
                                           source: str) -> None:
    r = _save(s.url, "by-key", {"conversation": key})
    # before: 404 'no context holds conversation ... (a history parked to the cache has no key ...)'
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["source"], body["n_tokens"], body["slot"]) == (source, len(held), "main"), body
    assert f"holds it: {len(held)} tokens" in body["reason"], body
    restored_into_main_and_continued(s, "by-key", history, held)


def test_a_conversation_parked_to_ram_is_saved_by_its_key(answering_model, tmp_path):
    with _server(answering_model, tmp_path) as s:
        history, _ = _conversation(s.url, 120)
        held, key = _tokens(s, 0), _key_of_main(s.url)
        assert len(held) > 512                          # does not fit the slot: parked to the cache
        _other_request(s.url)
        assert key not in [c.get("conversation") for c in httpx.get(s.url + "/v1/slots").json()["slots"]]
        _saved_then_restored_answers_as_before(s, key, history, held, "ram")


def test_a_conversation_spilled_to_disk_is_saved_by_its_key_and_an_older_sidecar_still_loads(answering_model,
                                                                                             tmp_path):
    flags = cold_only(answering_model, tmp_path, conversation_cache_sessions_dir=str(tmp_path / "sessions"))
    with LiveServer(**flags) as s:
        history, _ = _conversation(s.url, 120)
        held, key = _tokens(s, 0), _key_of_main(s.url)
        _other_request(s.url)                           # main parked straight to the cold level
        s.state.scheduler.cache.flush()
        _saved_then_restored_answers_as_before(s, key, history, held, "cold")
    # an older Strata's sidecars: no key recorded
    cold = tmp_path / "cold"
    for name in os.listdir(cold):
        if name.endswith(".json"):
            d = json.loads((cold / name).read_text())
            d.get("meta", {}).pop("conversation", None)
            (cold / name).write_text(json.dumps(d, separators=(",", ":")))
    with LiveServer(**flags) as s:
        r = _save(s.url, "by-key", {"conversation": key})
        assert r.status_code == 404 and "name it by its messages" in r.json()["error"]["message"], r.text
        r = _save(s.url, "by-messages", {"messages": history})
        # the entry the stop kept holds the next turn too: all of the history sent, as rendered, is saved
        assert r.status_code == 200 and r.json()["source"] == "cold" and r.json()["n_tokens"] >= len(held), r.text
