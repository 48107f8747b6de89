"""A conversation in main with a short side request after each turn (Claude Code's titles and summaries): each
side request displaces the conversation, which is parked into a slot, and its next turn copies it back. The
park goes into the slot holding the conversation's older copy, not into the next empty slot: before, four side
requests left four slots each holding a stale copy of the same conversation (a new-user trial's /v1/slots),
and another conversation found no empty slot. Live tiny server on loopback."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer

ASK, ANSWER = 30, (31, 32)        # the scripted model answers 31 32 after 30, whatever came before
BASE = [(i * 7) % 400 + 50 for i in range(2000)] + [ASK]


@pytest.fixture(scope="module")
def server(tiny_model_factory):
    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, script=(ASK, *ANSWER))
    s = LiveServer(model=str(model), ctx=4096, batch=4, slot_ctx=4096, threads=1, conversation_cache_mib=0)
    s.start()
    yield s
    s.stop()


def complete(url: str, prompt: list[int]) -> dict:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2, "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_each_park_goes_into_the_conversations_older_copy(server):
    url = server.url
    prompt = list(BASE)
    for turn in range(4):
        out = complete(url, prompt)
        assert turn == 0 or out["timings"]["cache_n"] >= len(prompt) - 302, out["timings"]   # only the new tokens read
        complete(url, [60 + turn, 61, 62, ASK])                     # the side request: displaces main
        # the next turn: the history, the answer as the model wrote it (the scripted 31 32), new tokens
        prompt = prompt + list(ANSWER) + [(i * 11 + turn) % 400 + 50 for i in range(300)] + [ASK]
    slots = httpx.get(url + "/v1/slots", timeout=30).json()
    parks = [d for d in slots["decisions"] if d["park"]]
    assert len(parks) == 4, slots["decisions"]
    first = parks[0]["slot"]
    assert [d["slot"] for d in parks] == [first] * 4, parks
    assert [d["reason"] for d in parks[1:]] == ["own_copy"] * 3, parks
    assert all(d["reused"] > 0 for d in parks[1:]), parks                     # the older copy's tokens
    held = [s for s in slots["slots"] if s["id"] != "main" and s["tokens"] > 0]
    assert [s["id"] for s in held] == [first], held                          # the other slots stay empty
