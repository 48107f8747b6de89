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


def _started(tiny_model_factory, batch: int, cache_mib: int) -> LiveServer:
    """A server of the scripted tiny model (it answers ASK with ANSWER), contexts of 4,096 tokens."""
    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, script=(ASK, *ANSWER))
    s = LiveServer(model=str(model), ctx=4096, batch=batch, slot_ctx=4096, threads=1,
                   conversation_cache_mib=cache_mib)
    s.start()
    return s


@pytest.fixture(scope="module")
def server(tiny_model_factory):
    s = _started(tiny_model_factory, batch=4, cache_mib=0)
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


@pytest.fixture(scope="module")
def cached_server(tiny_model_factory):
    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, script=(ASK, *ANSWER))
    s = LiveServer(model=str(model), ctx=4096, batch=4, slot_ctx=4096, threads=1, conversation_cache_mib=256)
    s.start()
    yield s
    s.stop()


def cache_ram_parks(url: str) -> int:
    metrics = httpx.get(url + "/metrics", timeout=30).text
    lines = [x for x in metrics.splitlines() if x.startswith('strata_parks_total{kind="cache_ram"} ')]
    return int(float(lines[0].rsplit(" ", 1)[1])) if lines else 0      # listed from the first such park


def test_a_conversation_parked_into_a_slot_is_not_also_snapshotted_to_the_cache(cached_server):
    """The side request that displaces the conversation finds it copied into a slot, which keeps all of it (and is
    parked to the cache itself before anything overwrites it). Its start still snapshotted main's history into the
    conversation cache's RAM level, at every side request of a growing conversation (a trial on SmolLM2: 6,500
    tokens, 150 MB, 80-560 ms before the side request's first token). Only the side requests' own histories,
    displaced from main by the conversation's next turn, go to the cache now."""
    url = cached_server.url
    prompt = list(BASE)
    for turn in range(4):
        before = cache_ram_parks(url)
        out = complete(url, prompt)
        assert turn == 0 or out["timings"]["cache_n"] >= len(prompt) - 302, out["timings"]
        assert cache_ram_parks(url) - before == (0 if turn == 0 else 1)     # the side request's history
        before = cache_ram_parks(url)
        complete(url, [60 + turn, 61, 62, ASK])                              # displaces main into a slot
        assert cache_ram_parks(url) == before, turn                          # and not into the cache too
        prompt = prompt + list(ANSWER) + [(i * 11 + turn) % 400 + 50 for i in range(300)] + [ASK]
    parks = [d for d in httpx.get(url + "/v1/slots", timeout=30).json()["decisions"] if d["park"]]
    assert [d["reason"] for d in parks[1:]] == ["own_copy"] * 3, parks


def test_a_copy_whose_conversation_went_on_says_superseded(server):
    """/v1/slots showed such a slot (a new-user trial: 9,195 tokens of the conversation main went on with) as an
    idle slot with neither `value` nor `protection_left_s`, and nothing saying why: the policy counts it as
    worth nothing, the next request may take it."""
    url = server.url
    prompt = [(i * 13) % 400 + 50 for i in range(2000)] + [ASK]
    complete(url, prompt)
    complete(url, [70, 71, 72, ASK])                                  # displaces it: parked into a slot
    complete(url, prompt + list(ANSWER) + [(i * 17) % 400 + 50 for i in range(300)] + [ASK])   # goes on in main
    slots = httpx.get(url + "/v1/slots", timeout=30).json()["slots"]
    main = slots[0]
    assert main["id"] == "main" and main["tokens"] > 2000, main
    copies = [s for s in slots if s["id"] != "main" and s.get("conversation") == main["conversation"]]
    assert len(copies) == 1 and copies[0]["tokens"] > 2000, slots
    assert copies[0].get("superseded") is True, copies[0]
    assert "value" not in copies[0] and "protection_left_s" not in copies[0], copies[0]
    assert all("superseded" not in s for s in slots if s is not copies[0]), slots


@pytest.fixture()
def one_slot_server(tiny_model_factory):
    """A new server for each test: what its slot holds is the test's own."""
    s = _started(tiny_model_factory, batch=1, cache_mib=256)
    yield s
    s.stop()


def test_a_request_that_takes_a_superseded_copy_holds_a_history_worth_keeping(one_slot_server):
    """A request placed in a slot holding a superseded copy (worth nothing: taken as blank) made that slot its
    own history, but the slot kept its `superseded` mark: the policy went on counting the new history as worth
    nothing, and the next request to take the slot overwrote it without parking it to the cache, so its
    conversation read its whole history again (a trial with Claude Code's and opencode's shapes: opencode's
    6,571-token history read again after a request of its own conversation reused 109 tokens of its slot)."""
    from tests.server.live import run_together

    url, server = one_slot_server.url, one_slot_server
    a = [(i * 13) % 400 + 50 for i in range(1500)] + [ASK]
    complete(url, a)
    complete(url, [70, 71, 72, ASK])                                  # displaces a: parked into slot 1
    a = a + list(ANSWER) + [(i * 17) % 400 + 50 for i in range(200)] + [ASK]
    complete(url, a)                                                  # a goes on in main: slot 1 superseded
    assert server.state.scheduler.table[1].superseded
    c = [(i * 19) % 400 + 50 for i in range(1200)] + [ASK]
    a = a + list(ANSWER) + [80, 81, ASK]
    run_together(server, [lambda: complete(url, c), lambda: complete(url, a)])   # c runs in slot 1
    slot = next(s for s in httpx.get(url + "/v1/slots", timeout=30).json()["slots"] if s["id"] == 1)
    assert slot["tokens"] >= len(c) and "superseded" not in slot and "value" in slot, slot
    a = a + list(ANSWER) + [82, 83, ASK]
    run_together(server, [lambda: complete(url, a), lambda: complete(url, [90, 91, 92, ASK])])   # takes slot 1
    out = complete(url, c + list(ANSWER) + [84, 85, ASK])
    assert out["timings"]["cache_n"] >= len(c), out["timings"]        # c's history was parked to the cache first


def test_a_copy_is_superseded_only_by_a_request_that_holds_it(one_slot_server):
    """A request of the same conversation that went another way early (the same key: a tool named on one turn,
    different tools, a Responses API `prompt_cache_key` shared by Codex's side requests) marked the conversation's
    parked copy superseded, though it held none of it: the next park overwrote the copy without handing it to the
    cache, and the conversation's next turn read its whole history again (a trial with Codex's shape: 13,167 of
    13,172 tokens read after the turn before it named its tool). A copy is superseded only when the request that
    went on holds at least STRATA_SLOT_OWN_MIN_SHARE of it (as a slot is the request's own)."""
    from tests.server.live import run_together

    url, server = one_slot_server.url, one_slot_server
    h = [(i * 23) % 400 + 50 for i in range(1500)] + [ASK]
    complete(url, h)
    other = h[:300] + [(i * 29) % 400 + 50 for i in range(800)] + [ASK]    # the same key: its first 256 tokens
    complete(url, other)                                     # h is parked into slot 1, `other` runs in main
    held = server.state.scheduler.table[1]
    assert held.tokens[:len(h)] == h and not held.superseded
    complete(url, [93, 94, 95, ASK])                         # displaces `other`
    run_together(server, [lambda: complete(url, [96, 97, ASK]), lambda: complete(url, [98, 99, ASK])])  # one in slot 1
    out = complete(url, h + list(ANSWER) + [86, 87, ASK])
    assert out["timings"]["cache_n"] >= len(h), out["timings"]      # h's copy went to the cache, not lost
