"""The solo conversation in main holds more tokens than a slot (--ctx 4096, --slot-ctx 2048), and another
conversation's request displaces it: main's history cannot be parked into a slot, so the conversation
cache takes it, and the new request runs. Before: the park copied 3,001 tokens into a 2,048-token slot,
the engine refused ('copy: 3001 tokens exceed context 1's capacity 2048') outside the request's own
error handling, so every step failed again: the request never got an answer (and any request running
beside it would have been failed with that internal error). On the live tiny server (real HTTP, real
engine, real cache)."""

from __future__ import annotations

import httpx2 as httpx

LONG = [(i * 7) % 400 + 50 for i in range(3000)]   # more than a slot's 2,048 tokens, less than main's 4,096


def complete(url: str, prompt: list[int]) -> dict:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2, "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_solo_history_longer_than_a_slot_is_parked_to_the_cache_when_displaced(tiny_server):
    url = tiny_server.url
    complete(url, LONG)                       # alone: main, the solo path
    other = complete(url, [60, 61, 62, 63])            # another conversation, alone: displaces main's history
    assert other["usage"]["completion_tokens"] == 2
    decisions = httpx.get(url + "/v1/monitor", timeout=30).json()["decisions"]
    skip = [d for d in decisions if d["park_skip"] == "too_long_for_slot"]
    assert skip and skip[-1]["source_slot"] == "main" and skip[-1]["slot"] is None
    # the long history went to the conversation cache: its next turn reads only what is new
    again = complete(url, LONG + [70, 71, 72])
    assert again["timings"]["cache_n"] >= len(LONG) - 1, again["timings"]
