"""A parked copy that the conversation's next request holds whole is still written to the conversation cache when
the context holding it is larger than every level that would keep it.

A request that holds a slot's parked copy of its conversation whole marks the copy superseded and overwritten
without a park: the context that went on keeps it. Session 30's review found the hole: when that context's history
is larger than every disk level's whole budget (its write is refused), the shorter copy, which fitted, was the one
history of the conversation the cache could have kept, and it was dropped too (at the stop, and when the slot was
overwritten). Now a copy held whole is left out only while a context the cache can keep holds it, or the cache
keeps a longer history of it already (test_superseded_copy_tail_parked.py: then it is still not written).

Real server, tiny model (256 bytes of KV a token), one slot, no RAM level, cold 1 MiB (4,096 tokens): the
conversation's 3,000-token start is parked into the slot, its next turn (4,400 tokens) goes on in main."""

from __future__ import annotations

import random

import pytest

from tests.server.live import LiveServer
from tests.server.test_superseded_copy_tail_parked import complete, tokens

N = 3000


@pytest.fixture(scope="module")
def model_8k(tiny_model_factory):
    return tiny_model_factory(ctx_len=8192, n_vocab=512, seed=3)


def server(model, cold) -> LiveServer:
    return LiveServer(model=str(model), ctx=8192, batch=1, slot_ctx=8192, threads=1, conversation_cache_mib=0,
                      conversation_cache_cold_dir=str(cold), conversation_cache_cold_mib=1)


def cold_starts(s: LiveServer) -> list[int]:
    return sorted(int(e.tokens[0]) for e in s.state.scheduler.cache.cascade.levels[-1].entries.values())


def go_on_past_the_budget(s: LiveServer, rng: random.Random, line: list[int]) -> None:
    complete(s.url, line)
    complete(s.url, tokens(rng, 13, N))              # displaces main: the line is parked into slot 1
    slot = s.state.scheduler.table[1]
    assert slot.tokens == line
    assert complete(s.url, line + tokens(rng, 12, 1400)) >= N - 1    # in main, copied from slot 1: 1.07 MiB
    assert slot.superseded


def test_the_copy_is_kept_at_the_stop(model_8k, tmp_path):
    rng = random.Random(3)
    line = tokens(rng, 11, N)
    with server(model_8k, tmp_path / "cold") as s:
        go_on_past_the_budget(s, rng, line)
    with server(model_8k, tmp_path / "cold") as s:
        assert 11 in cold_starts(s)                    # before: only 13's, the conversation gone from every level
        assert complete(s.url, line + tokens(rng, 14, 40)) >= N - 1


def test_the_copy_is_parked_when_its_slot_is_overwritten(model_8k, tmp_path):
    rng = random.Random(4)
    line = tokens(rng, 11, N)
    with server(model_8k, tmp_path / "cold") as s:
        go_on_past_the_budget(s, rng, line)
        complete(s.url, tokens(rng, 15, 600))          # displaces main (refused: too large) into slot 1, over the copy
        s.state.scheduler.cache.flush()
        assert 11 in cold_starts(s)                    # before: nowhere
        assert complete(s.url, line + tokens(rng, 14, 40)) >= N - 1

