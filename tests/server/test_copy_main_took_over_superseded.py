"""A slot whose conversation main took over and went on with is a superseded copy: worth nothing.

Session 39's agent soak: codex's request alone ran on main (the solo path), copied from slot 3, which kept its
2,240-token copy at full worth; an /infill keystroke a second later took claude's 8,726-token slot instead of
slot 3. Only a copy parked from main was superseded when its conversation went on elsewhere; the slot a solo
request copied from is the same copy seen from the other side. Nothing is lost by taking it: main holds all of
it, and main's history is parked (a slot or the conversation cache) when it is displaced.

Live tiny server on loopback: three slots in one group, a RAM conversation cache, token-id prompts."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer, run_together

ASK, ANSWER = 30, (31, 32)        # the scripted model answers 31 32 after 30, whatever came before


def seq(mul: int, n: int) -> list[int]:
    return [(i * mul) % 400 + 50 for i in range(n)]


def complete(url: str, prompt: list[int]) -> dict:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2, "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


# the soak's keystroke was placed by the learned policy (on by default, used once it has seen
# STRATA_SLOT_LEARN_MIN_HISTORIES histories): with none needed, it decides here too
@pytest.fixture(params=["place", "learned"])
def server(tiny_model_factory, request):
    model = tiny_model_factory(ctx_len=8192, n_vocab=512, seed=3, script=(ASK, *ANSWER))
    env = {"STRATA_SLOT_LEARN_MIN_HISTORIES": "0"} if request.param == "learned" else {}
    s = LiveServer(model=str(model), ctx=8192, batch=3, batch_groups=1, slot_ctx=8192, threads=1,
                   conversation_cache_mib=256, env=env)
    s.start()
    yield s
    s.stop()


def test_a_slot_main_took_over_is_taken_before_another_conversations_history(server):
    url, table = server.url, server.state.scheduler.table
    a = seq(13, 4000) + [ASK]     # value after expiry ~0.019: worth keeping (STRATA_SLOT_EXPIRED_KEEP_SCORE 0.01)
    b = seq(17, 1500) + [ASK]
    e = seq(19, 600) + [ASK]      # ~0.0006 once expired: not worth keeping, but worth more than a blank slot
    run_together(server, [lambda: complete(url, a), lambda: complete(url, b), lambda: complete(url, e)])

    def holder(p: list[int]) -> int:
        return next(c.id for c in table.slots if c.tokens[:len(p)] == p)

    slot_a, slot_b, slot_e = holder(a), holder(b), holder(e)
    assert len({slot_a, slot_b, slot_e}) == 3
    a = a + list(ANSWER) + seq(23, 200) + [ASK]
    out = complete(url, a)                                     # alone: main, copied from slot_a
    assert out["timings"]["cache_n"] >= 4000, out["timings"]
    assert table.main.tokens[:len(a)] == a
    assert table[slot_a].superseded and table[slot_a].covered           # main holds it whole
    slots = httpx.get(url + "/v1/slots", timeout=30).json()["slots"]
    shown = next(s for s in slots if s["id"] == slot_a)
    assert shown.get("superseded") is True and "value" not in shown, shown

    c = seq(29, 300) + [ASK]                                   # a new conversation beside b's next turn
    b = b + list(ANSWER) + [80, 81, ASK]
    run_together(server, [lambda: complete(url, c), lambda: complete(url, b)])
    assert table[slot_e].tokens[:len(e)] == e, "took another conversation's history"
    assert table[slot_a].tokens[:len(c)] == c                   # the superseded copy's slot
    assert table[slot_b].tokens[:len(b)] == b

    complete(url, seq(31, 500) + [ASK])                        # alone: displaces a from main
    held = len(a)
    out = complete(url, a + list(ANSWER) + [82, 83, ASK])     # nothing of a was lost
    assert out["timings"]["cache_n"] >= held, out["timings"]


def test_mains_history_that_went_on_in_a_slot_is_superseded(server):
    """The other side: a conversation main held goes on in a slot (its turn beside another request), copied from
    main; main's history is then the idle copy, worth nothing (/v1/slots says so), and its conversation's later
    turns still reuse all of it."""
    url, table = server.url, server.state.scheduler.table
    a = seq(13, 3000) + [ASK]
    complete(url, a)                                           # alone: main
    a = a + list(ANSWER) + seq(23, 100) + [ASK]
    other = seq(37, 400) + [ASK]
    run_together(server, [lambda: complete(url, a), lambda: complete(url, other)])
    went_on = next(c for c in table.slots if c.tokens[:len(a)] == a)
    assert went_on.reused_tokens >= 3000
    assert table.main.superseded and table.main.covered
    main = httpx.get(url + "/v1/slots", timeout=30).json()["slots"][0]
    assert main["id"] == "main" and main.get("superseded") is True, main
    held = len(a)
    out = complete(url, a + list(ANSWER) + [84, 85, ASK])     # alone: main again, copied from the slot
    assert out["timings"]["cache_n"] >= held, out["timings"]
    assert not table.main.superseded
    assert went_on.superseded                                 # and the slot is the copy now
