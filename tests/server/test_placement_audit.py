"""Seed 000's placements on a live server, checked decision by decision by benchmarks/placement_audit.py (the
seed's rules written again from its text, not slot_policy's code) from the debug log's `slot seen` lines: what
each decision saw. A conversation in main displaced by side requests (parks, skips), conversations side by side
in slots of two groups, a history left past its protection. Live tiny server on loopback, --batch 4
--batch-groups 2, seed 000's order exactly (STRATA_SLOT_LEARNED=0)."""

from __future__ import annotations

import json
import logging
import re
import threading
import time

import httpx2 as httpx
import pytest

from benchmarks import placement_audit as audit
from tests.server.live import LiveServer

ASK, ANSWER = 30, (31, 32)        # the scripted model answers 31 32 after 30
ENV = {"STRATA_SLOT_LEARNED": "0", "STRATA_SLOT_TTL_MAX_S": "6", "STRATA_SLOT_IDLE_VALUE_ZERO_S": "20"}
SEED = audit.Seed(ttl_max_s=6, zero_s=20)


def tokens(seed: int, n: int) -> list[int]:
    return [(i * 7 + seed * 13) % 400 + 50 for i in range(n)]


def complete(url: str, prompt: list[int], max_tokens: int = 2) -> dict:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def at_once(url: str, prompts: list[list[int]]) -> None:
    """The first prompt answers 40 tokens (0.8 s at the slowed step), the others start while it runs."""
    threads = [threading.Thread(target=complete, args=(url, p, 40 if i == 0 else 2)) for i, p in enumerate(prompts)]
    threads[0].start()
    time.sleep(0.3)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join()


class SlowEngine:
    """The real engine, each decode step (lookup's too) 20 ms slower: requests sent together run side by side."""

    def __init__(self, engine) -> None:
        self._engine = engine

    def __getattr__(self, name: str):
        return getattr(self._engine, name)

    def step(self, *a, **kw):
        time.sleep(0.02)
        return self._engine.step(*a, **kw)

    def decode(self, *a, **kw):
        time.sleep(0.02)
        return self._engine.decode(*a, **kw)

    def extend(self, *a, **kw):      # lookup decoding's steps
        time.sleep(0.02)
        return self._engine.extend(*a, **kw)


@pytest.fixture(scope="module")
def traffic(tiny_model_factory):
    """The debug log's lines of a short run of agent-shaped traffic."""
    model = tiny_model_factory(ctx_len=8192, n_vocab=512, seed=3, script=(ASK, *ANSWER))
    handler = _Lines()
    logger = logging.getLogger("strata.server")
    old = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        with LiveServer(model=str(model), ctx=8192, batch=4, batch_groups=2, slot_ctx=8192, threads=1,
                        conversation_cache_mib=0, env=ENV) as s:
            s.state.scheduler.engine = SlowEngine(s.state.scheduler.engine)
            a = tokens(1, 4000) + [ASK]                          # worth parking when expired
            complete(s.url, a)                                   # main, alone
            complete(s.url, [60, 61, 62, ASK])                   # a side request: parks a into a slot
            a += [*ANSWER, *tokens(2, 200), ASK]
            complete(s.url, a)                                   # a's next turn, alone: main again
            b, c = tokens(3, 1800) + [ASK], tokens(4, 600) + [ASK]
            at_once(s.url, [a + [*ANSWER, *tokens(5, 100), ASK], b, c])   # side by side: slots
            a += [*ANSWER, *tokens(5, 100), ASK]
            at_once(s.url, [a + [*ANSWER, *tokens(6, 100), ASK], b + [*ANSWER, *tokens(7, 50), ASK],
                            tokens(8, 900) + [ASK]])
            time.sleep(3)                                        # c (600 tokens) past its protection
            at_once(s.url, [tokens(9, 700) + [ASK], tokens(10, 300) + [ASK], b + [*ANSWER, ASK]])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    return handler.lines


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_every_decision_follows_the_seed(traffic):
    result = audit.run(traffic, [], SEED)
    assert result.findings == []
    counts = result.counts
    assert counts["park:blank"] >= 1, counts                           # a's park into an empty slot
    assert counts["place:own_prefix"] + counts["place:blank_less_loaded"] >= 1, counts
    assert sum(v for k, v in counts.items() if k.startswith("place:")) >= 5, counts
    assert counts["main:solo"] >= 2, counts


def test_the_audit_finds_a_continued_conversation_in_another_conversations_slot(traffic):
    """The audit is not a tautology: the same log with one continued conversation's placement moved into a slot
    holding another conversation is a finding."""
    seen = [json.loads(m.group(1)) for line in traffic if (m := re.search(r"slot seen: (\{.*\})$", line))]
    target = next(s for s in seen if s["reason"] == "own_prefix"
                  and any(r[2] > 0 and r[3] == 0 and not r[5] and not r[6] for r in s["slots"]))
    other = next(r[0] for r in target["slots"] if r[2] > 0 and r[3] == 0 and not r[5] and not r[6])
    moved = [line if f'"request": {target["request"]},' not in line else
             "slot seen: " + json.dumps({**target, "slot": other}) for line in traffic]
    findings = audit.run(moved, [], SEED).findings
    assert any("placed in another conversation's slot" in f for f in findings), findings


def test_the_audit_finds_a_park_that_renews_the_last_use(traffic):
    seen = [json.loads(m.group(1)) for line in traffic if (m := re.search(r"slot seen: (\{.*\})$", line))]
    park = next(s for s in seen if s["kind"] == "park" and s["slot"] is not None)
    later = next(s for s in seen if s["now"] > park["now"] and s["kind"] == "place")
    renewed = {**later, "slots": [[*r[:4], later["now"] - 0.001, *r[5:]] if r[0] == park["slot"] and not r[5]
                                  else r for r in later["slots"]]}
    lines = [line if f'"request": {later["request"]}, "kind": "place"' not in line
             else "slot seen: " + json.dumps(renewed) for line in traffic]
    findings = audit.run(lines, [], SEED).findings
    assert any(f"slot {park['slot']}: last use" in f for f in findings), findings
