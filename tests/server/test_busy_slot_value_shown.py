"""/v1/slots shows seed 000's protection and value for idle slots only. A slot in use is never weighed by the
policy and its age starts again when its use ends; before, a slot reading or answering a new turn showed its
previous use's numbers (protection 0 s, value 0.0 for a history expired before the turn came back). Live tiny
server on loopback, --batch 2, the protection curve scaled down (STRATA_SLOT_TTL_MAX_S=24)."""

from __future__ import annotations

import threading
import time

import httpx2 as httpx

from tests.server.live import LiveServer

ASK = 30


class SlowDecode:
    """The real engine, each decode or mixed step (lookup's too) 50 ms slower: a request stays in its slot a while."""

    def __init__(self, engine) -> None:
        self._engine = engine

    def __getattr__(self, name: str):
        return getattr(self._engine, name)

    def decode(self, *a, **kw):
        time.sleep(0.05)
        return self._engine.decode(*a, **kw)

    def extend(self, *a, **kw):
        time.sleep(0.05)
        return self._engine.extend(*a, **kw)

    def step(self, *a, **kw):        # a mixed step: prompt pieces beside decoding rows
        time.sleep(0.05)
        return self._engine.step(*a, **kw)


def complete(url: str, prompt: list[int], max_tokens: int) -> None:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
                   timeout=120)
    assert r.status_code == 200, r.text


def hold_main(url: str, done: threading.Event) -> None:
    """A request alone takes main; streamed until `done`, then let go (the server ends it): main stays busy."""
    body = {"prompt": [60, 61, ASK], "max_tokens": 2000, "temperature": 0, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
        for _ in r.iter_lines():
            if done.is_set():
                return


def slot(url: str, i: int) -> dict:
    return next(s for s in httpx.get(url + "/v1/slots", timeout=30).json()["slots"] if s["id"] == i)


def test_a_slot_in_use_shows_no_protection_or_value_and_an_idle_one_its_own(tiny_model_factory):
    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, script=(ASK, 31, 32))
    env = {"STRATA_SLOT_TTL_MAX_S": "24", "STRATA_SLOT_LEARNED": "0"}
    with LiveServer(model=str(model), ctx=4096, batch=2, slot_ctx=4096, threads=1, conversation_cache_mib=0,
                    env=env) as s:
        s.state.scheduler.engine = SlowDecode(s.state.scheduler.engine)
        conv = [(i * 7) % 400 + 50 for i in range(3000)] + [ASK]
        done = threading.Event()
        holder = threading.Thread(target=hold_main, args=(s.url, done))    # main busy: the turns go to slots
        holder.start()
        time.sleep(0.3)
        complete(s.url, conv, 2)                                 # the conversation's first turn, in a slot
        placed = [d for d in httpx.get(s.url + "/v1/slots", timeout=30).json()["decisions"] if d["slot"] != "main"]
        assert placed, placed
        i = placed[-1]["slot"]
        time.sleep(1.2)                                          # 3,000 tokens: protected 0.67 s at this scale
        idle = slot(s.url, i)
        assert idle["state"] == "idle" and idle["protection_left_s"] == 0.0 and idle["value"] > 0, idle
        turn = threading.Thread(target=complete, args=(s.url, conv + [31, 32, 70, 71, ASK], 20))
        turn.start()
        time.sleep(0.4)
        busy = slot(s.url, i)
        assert busy["state"] in ("prefill", "decode"), busy
        assert "protection_left_s" not in busy and "value" not in busy, busy   # before: 0.0 and the old value
        turn.join()
        ended = slot(s.url, i)
        done.set()
        holder.join()
        assert ended["state"] == "idle" and ended["protection_left_s"] > 0, ended    # the use just ended
