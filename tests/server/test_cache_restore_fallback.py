"""A cache restore that fails falls back to reading the prompt: a conversation parked in the cold disk
level has its image damaged on disk between two turns (cut short, or bytes flipped in its first KV
chunk); its next turn reads the whole prompt, answers exactly as a fresh read does, the failure is
counted in /metrics, and the server goes on serving. A hit the cache does not even try (a slot too
small for one snapshot chunk of the entry) is a plain miss instead: not counted, and the slot keeps
what it held."""

from __future__ import annotations

import random
from pathlib import Path

import httpx2 as httpx
import pytest
from strata.engine import snapshot

from tests.server.live import LiveServer, run_together
from tests.server.test_metrics import scrape


def ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 500) for _ in range(n)]


def complete(url: str, prompt: list[int], max_tokens: int) -> dict:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                                  "ignore_eos": True}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def cut_short(image: Path) -> None:
    """A write that stopped inside the header."""
    with open(image, "r+b") as f:
        f.truncate(40)


def flip_first_chunk(image: Path) -> None:
    """Bytes flipped in the first KV chunk (the header and its token ids stay good)."""
    data = bytearray(image.read_bytes())
    at = snapshot.read_header(bytes(data[: 1 << 20])).header_size + 64
    data[at: at + 64] = bytes(b ^ 0xFF for b in data[at: at + 64])
    image.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [cut_short, flip_first_chunk], ids=["cut_short", "flipped"])
def test_a_damaged_cold_image_is_read_again_from_the_prompt(tiny_model, tmp_path, damage):
    cold = tmp_path / "cold"
    a = ids(600, 61)
    turn = a + ids(30, 63)
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0,
                    conversation_cache_cold_mib=64, conversation_cache_cold_dir=str(cold),
                    conversation_cache_min_free_mib=0, conversation_cache_park_min_free_mib=0) as s:
        complete(s.url, a, 2)
        complete(s.url, ids(300, 62), 2)                 # B takes main: A is parked in the cold level
        s.state.cache.flush()
        images = sorted(cold.glob("strata-conv-*.img"))
        assert len(images) == 1
        assert s.state.cache.lookup(turn).level == "cold"   # A's next turn would be restored from it
        damage(images[0])
        before = scrape(s.url)

        answer = complete(s.url, turn, 8)

        rec = httpx.get(s.url + "/v1/monitor").json()["requests"][-1]
        assert rec["status"] == "ok" and rec["source"] == "none" and rec["reused_tokens"] == 0
        assert answer["usage"]["prompt_tokens"] == len(turn)
        after = scrape(s.url)
        assert after['strata_restore_fallbacks_total{level="cold"}'] == \
            before.get('strata_restore_fallbacks_total{level="cold"}', 0) + 1
        assert after["strata_cache_damaged_total"] == before["strata_cache_damaged_total"] + 1
        assert s.state.cache.lookup(turn) is None or s.state.cache.lookup(turn).level != "cold"   # discarded
        # still healthy: the conversation goes on from main
        assert httpx.get(s.url + "/health").json()["status"] == "ok"
        complete(s.url, turn + ids(10, 64), 2)
        rec = httpx.get(s.url + "/v1/monitor").json()["requests"][-1]
        assert rec["status"] == "ok" and rec["source"] == "main" and rec["reused_tokens"] >= len(turn)

    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as fresh:
        reference = complete(fresh.url, turn, 8)
    assert answer["choices"][0]["text"] == reference["choices"][0]["text"]
    assert answer["usage"]["completion_tokens"] == reference["usage"]["completion_tokens"] == 8


def test_a_slot_smaller_than_one_snapshot_chunk_is_a_plain_miss(tiny_model):
    """A parked conversation of 600 tokens matches a prompt placed in a 200-token slot, which cannot
    hold even one snapshot chunk of it: the cache tries nothing, that is no restore fallback, and the
    slot keeps (and reuses) what it held."""
    with LiveServer(model=str(tiny_model), ctx=2048, batch=1, slot_ctx=200, threads=1, conversation_cache_mib=64,
                    conversation_cache_min_free_mib=0, conversation_cache_park_min_free_mib=0) as s:
        a = ids(600, 71)
        complete(s.url, a, 2)
        complete(s.url, ids(300, 72), 2)                 # B takes main: A is parked in RAM
        assert s.state.cache.lookup(a[:150] + [7]).level == "ram"
        before = scrape(s.url)

        run_together(s, [lambda: complete(s.url, a[:150] + [7], 2), lambda: complete(s.url, ids(20, 73), 2)])    # the first goes to slot 1 (capacity 200)
        first = [r for r in httpx.get(s.url + "/v1/monitor").json()["requests"] if r["context"] == 1][-1]
        assert first["status"] == "ok" and first["source"] == "none" and first["reused_tokens"] == 0

        run_together(s, [lambda: complete(s.url, a[:170], 2), lambda: complete(s.url, ids(20, 74), 2)])         # slot 1 shares 150 tokens with it, the cache 169
        again = [r for r in httpx.get(s.url + "/v1/monitor").json()["requests"] if r["context"] == 1][-1]
        assert again["status"] == "ok" and again["source"] == "slot" and again["reused_tokens"] == 150
        after = scrape(s.url)
        assert after.get('strata_restore_fallbacks_total{level="ram"}', 0) == \
            before.get('strata_restore_fallbacks_total{level="ram"}', 0)
