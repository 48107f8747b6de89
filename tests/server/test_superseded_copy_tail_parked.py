"""A parked copy superseded by a branch of its conversation still goes to the conversation cache when
overwritten, unless the branch holds all of it.

A request of the conversation that holds at least STRATA_SLOT_OWN_MIN_SHARE of a slot's parked copy marks the
copy superseded (worth nothing to the slot policy), and a superseded copy was overwritten without a park. A
branch (a named session restored and continued from its saved point, an agent's rewind to an earlier message)
holds only the copy's start: the rest, the conversation's main line, was lost. An agent soak (benchmarks/
RESULTS.md, "Agent soak") lost a 7,633-token history so, its next turn reusing a 7,255-token older copy from
cold. Now only a copy the request holds whole is taken as kept; a superseded copy with a tail of its own is
parked when overwritten, and its conversation's next turn restores it.

Real server, tiny model, one slot, a RAM cache, requests one at a time (each runs in main)."""

from __future__ import annotations

import random

import httpx2 as httpx

from tests.server.live import LiveServer

N = 3000


def complete(url: str, prompt: list[int]) -> int:
    r = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 1, "temperature": 0},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def cache_parks(url: str) -> float:
    """strata_parks_total of the histories handed to the conversation cache (kind cache_*)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('strata_parks_total{kind="cache_'))


def tokens(rng: random.Random, first: int, n: int) -> list[int]:
    return [first] + [rng.randrange(10, 500) for _ in range(n - 1)]


def test_a_branch_leaves_the_main_line_to_the_cache(tiny_model):
    rng = random.Random(7)
    line = tokens(rng, 11, N)
    branch = line[:2000] + tokens(rng, 12, 500)       # the same conversation key (its first 256 tokens), 2/3 of it
    with LiveServer(model=str(tiny_model), ctx=4096, batch=1, slot_ctx=4096, threads=1,
                    conversation_cache_mib=256) as s:
        complete(s.url, line)
        complete(s.url, tokens(rng, 13, N))            # displaces main: the line is parked into slot 1
        slot = s.state.scheduler.table[1]
        assert slot.tokens == line
        assert complete(s.url, branch) >= 2000          # copied from slot 1; the copy is superseded
        assert slot.superseded
        complete(s.url, tokens(rng, 14, N))            # displaces main: the branch is parked into slot 1
        assert slot.tokens[:2500] == branch[:2500]
        # the line's next turn: its whole history from the cache (before: the branch's 2,000 from slot 1)
        assert complete(s.url, line + tokens(rng, 15, 40)) >= N


def test_a_copy_the_request_holds_whole_is_still_overwritten_without_a_park(tiny_model):
    rng = random.Random(8)
    line = tokens(rng, 11, N)
    with LiveServer(model=str(tiny_model), ctx=4096, batch=1, slot_ctx=4096, threads=1,
                    conversation_cache_mib=256) as s:
        complete(s.url, line)
        complete(s.url, tokens(rng, 13, N))
        slot = s.state.scheduler.table[1]
        assert slot.tokens == line
        complete(s.url, line + tokens(rng, 12, 200))      # the conversation goes on in main, holding the copy whole
        assert slot.superseded and slot.covered
        before = cache_parks(s.url)
        complete(s.url, tokens(rng, 14, N))               # main's history goes into slot 1 over its own copy
        assert slot.tokens[:N] == line
        assert cache_parks(s.url) == before               # the copy was not written to the cache again
