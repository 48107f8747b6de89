"""The scheduler applying the slot policy and the conversation cache on a live server: a conversation
displaced from main comes back from the RAM level; with STRATA_SLOT_CACHE_AFFINITY=1 and groups, the
solo conversation is parked into a slot by the engine's copy (and restored from it), a low-value one is
not (`park_skip` main_low_value); plain --batch places by the policy with its reason in the trace."""

from __future__ import annotations

import random

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer, run_together
from tests.server.test_metrics import scrape


def ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 500) for _ in range(n)]


def complete(url: str, prompt: list[int], max_tokens: int = 2) -> dict:
    r = httpx.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def last_request(url: str) -> dict:
    return httpx.get(url + "/v1/monitor").json()["requests"][-1]


def decisions(url: str) -> list[dict]:
    return httpx.get(url + "/v1/slots").json()["decisions"]


def test_a_displaced_conversation_comes_back_from_ram(tiny_model, tmp_path):
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=64,
                    conversation_cache_min_free_mib=0, conversation_cache_cold_dir=str(tmp_path)) as s:
        a = ids(600, 1)
        complete(s.url, a)
        complete(s.url, ids(300, 2))                  # B takes main: A is parked in RAM
        complete(s.url, a + ids(20, 3))               # A's next turn
        rec = last_request(s.url)
        assert rec["source"] == "ram" and rec["reused_tokens"] >= 600
        placed = decisions(s.url)[-1]        # the placement's trace entry says what was reused, and from where
        assert (placed["slot"], placed["reused"], placed["source_slot"]) == ("main", rec["reused_tokens"], "cache")
        snap = httpx.get(s.url + "/v1/monitor").json()
        assert snap["cache"]["hits"]["ram"] >= 1


@pytest.mark.parametrize("cache_mib", [0, 64])
def test_a_displaced_history_is_parked_once(tiny_model, tmp_path, cache_mib):
    """Main displaced by a new conversation is parked, then overwritten by it: one park, not a second one of
    the same history (counted twice in /metrics: 'cache_discard' twice with the cache off, 'cache_none'
    after 'cache_ram' with it on)."""
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=cache_mib,
                    conversation_cache_min_free_mib=0, conversation_cache_cold_dir=str(tmp_path)) as s:
        for seed in (1, 2, 3):                        # each displaces the one before
            complete(s.url, ids(40, seed))
        parks = {k: v for k, v in scrape(s.url).items() if k.startswith("strata_parks_total")}
        kind = "cache_ram" if cache_mib else "cache_discard"
        assert parks == {f'strata_parks_total{{kind="{kind}"}}': 2}, parks
        assert scrape(s.url)[f'strata_cache_parks_total{{destination="{kind[6:]}"}}'] == 2


def test_the_mismatch_is_measured_against_the_history_that_was_reused(tiny_model, tmp_path):
    """A conversation displaced to the cache comes back edited: main still shares the system prompt with
    it, but the cache entry matched further, so the mismatch is where the prompt left that entry."""
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=64,
                    conversation_cache_min_free_mib=0, conversation_cache_cold_dir=str(tmp_path)) as s:
        shared = ids(300, 51)
        a = shared + ids(300, 52)
        complete(s.url, a)
        complete(s.url, shared + ids(300, 53))        # B takes main (same first 300 tokens): A is parked
        turn = a[:550] + ids(40, 54)                  # A again, edited from token 550 on
        complete(s.url, turn)
        rec = last_request(s.url)
        assert rec["source"] == "ram" and rec["reused_tokens"] >= 500
        assert rec["mismatch_at"] == 550 >= rec["reused_tokens"]
        assert rec["mismatch_excerpt"] == s.state.engine.detokenize(turn[550:562])[:80]


@pytest.fixture(scope="module")
def grouped(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=4096, batch=2, batch_groups=2, slot_ctx=4096, threads=1,
                    conversation_cache_mib=0, env={"STRATA_SLOT_CACHE_AFFINITY": "1"}) as s:
        yield s


def test_the_solo_conversation_is_parked_into_a_slot_and_comes_back(grouped):
    a = ids(2500, 11)
    complete(grouped.url, a)
    complete(grouped.url, ids(200, 12))               # displaces A from main
    park = [d for d in decisions(grouped.url) if d["park"]]
    assert park and park[-1]["source_slot"] == "main" and park[-1]["slot"] in (1, 2)
    slot = park[-1]["slot"]
    slots = {s["id"]: s for s in httpx.get(grouped.url + "/v1/slots").json()["slots"]}
    assert slots[slot]["tokens"] >= 2500
    complete(grouped.url, a + ids(10, 13))            # A again, alone: back on main, copied from its slot
    rec = last_request(grouped.url)
    assert rec["context"] == "main" and rec["source"] == "slot" and rec["reused_tokens"] >= 2500
    placed = decisions(grouped.url)[-1]
    assert (placed["slot"], placed["reused"], placed["source_slot"]) == ("main", rec["reused_tokens"], slot)


def test_a_low_value_main_history_is_not_parked(grouped, caplog):
    complete(grouped.url, ids(100, 21))
    with caplog.at_level("INFO", logger="strata.server.placement"):
        complete(grouped.url, ids(100, 22))
    skip = [d for d in decisions(grouped.url) if d["park_skip"]]
    assert skip and skip[-1]["park_skip"] == "main_low_value" and skip[-1]["slot"] is None
    # the log says what stayed and why (it said "-> slot None (group None) reason=skip reused=0 source=main")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("slot park_skip:")]
    assert lines == [f"slot park_skip: request {skip[-1]['request']} -> main's history (101 tokens) not parked "
                     "into a slot: main_low_value"], lines


def test_plain_batch_decisions_carry_their_reason(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=2048, batch=2, threads=1, conversation_cache_mib=0,
                    env={"STRATA_SLOT_EXPIRE_S": "600"}) as s:
        results = run_together(s, [lambda i=i: complete(s.url, ids(50, 30 + i), 30) for i in range(3)])
        assert all(r["usage"]["completion_tokens"] > 0 for r in results)
        placed = [d for d in decisions(s.url) if isinstance(d["slot"], int) and not d["park"]]
        assert placed and all(d["reason"] in ("own_prefix", "empty", "expired_lru", "shortest", "lru")
                              for d in placed)
        assert any(d["reason"] == "empty" for d in placed)


def test_sessions_save_and_restore_through_the_worker_thread(tiny_model, tmp_path):
    with LiveServer(model=str(tiny_model), ctx=2048, batch=1, threads=1, conversation_cache_mib=16,
                    conversation_cache_park_min_free_mib=0, conversation_cache_min_free_mib=0,
                    conversation_cache_sessions_dir=str(tmp_path / "sessions"),
                    conversation_cache_cold_dir=str(tmp_path / "cold")) as s:
        a = ids(400, 41)
        complete(s.url, a)
        r = httpx.post(s.url + "/v1/sessions/alpha/save", json={"slot": "main"})
        assert r.status_code == 200 and r.json()["n_tokens"] >= 400
        r = httpx.post(s.url + "/v1/sessions/alpha/restore", json={"slot": 1})
        assert r.status_code == 200 and r.json()["n_tokens"] >= 400
        slots = {x["id"]: x for x in httpx.get(s.url + "/v1/slots").json()["slots"]}
        assert slots[1]["tokens"] == r.json()["n_tokens"] and slots[1]["conversation"] == "session:alpha"
        assert httpx.post(s.url + "/v1/sessions/alpha/restore", json={"slot": 9}).status_code == 400
        assert [x["name"] for x in httpx.get(s.url + "/v1/sessions").json()["data"]] == ["alpha"]
        assert httpx.delete(s.url + "/v1/sessions/alpha").status_code == 200


def test_a_session_restore_parks_the_history_it_overwrites(tiny_model, tmp_path):
    """Restoring a session into main overwrites the conversation main held: it goes to the conversation
    cache first, as a request's displacement does, so that conversation's next turn still reads only its
    new tokens (before, its history was dropped and read again whole)."""
    with LiveServer(model=str(tiny_model), ctx=2048, batch=1, threads=1, conversation_cache_mib=16,
                    conversation_cache_park_min_free_mib=0, conversation_cache_min_free_mib=0,
                    conversation_cache_sessions_dir=str(tmp_path / "sessions"),
                    conversation_cache_cold_dir=str(tmp_path / "cold")) as s:
        saved, working = ids(300, 51), ids(400, 52)
        complete(s.url, saved)
        assert httpx.post(s.url + "/v1/sessions/saved/save", json={"slot": "main"}).status_code == 200
        complete(s.url, working)                     # main now holds the working conversation
        r = httpx.post(s.url + "/v1/sessions/saved/restore", json={"slot": "main"})
        assert r.status_code == 200, r.text
        again = complete(s.url, working + ids(5, 53))
        assert again["timings"]["cache_n"] >= len(working) - 1, again["timings"]


def test_a_restore_of_no_such_session_is_a_404_that_parks_nothing(tiny_model, tmp_path):
    """A session name that is not there (a typo) is answered before anything is done: the history in the
    context stays as it was and is not parked (it was, and the context, still holding it, was then marked
    parked: when that cache entry was later evicted, overwriting the context parked nothing)."""
    with LiveServer(model=str(tiny_model), ctx=2048, batch=1, threads=1, conversation_cache_mib=16,
                    conversation_cache_park_min_free_mib=0, conversation_cache_min_free_mib=0,
                    conversation_cache_sessions_dir=str(tmp_path / "sessions"),
                    conversation_cache_cold_dir=str(tmp_path / "cold")) as s:
        working = ids(400, 54)
        complete(s.url, working)                     # main holds the working conversation
        def parks() -> dict:
            return {k: v for k, v in scrape(s.url).items() if "parks_total" in k and v}

        before = parks()
        r = httpx.post(s.url + "/v1/sessions/no-such/restore", json={"slot": "main"})
        assert r.status_code == 404 and "no-such" in r.json()["error"]["message"], r.text
        assert parks() == before
        again = complete(s.url, working + ids(5, 55))
        assert again["timings"]["cache_n"] >= len(working) - 1, again["timings"]
