"""A parked copy that the conversation's next request holds whole but for its last token is overwritten without a
park while the context holding the rest is one the cache keeps, as a copy held to its last token is.

SlotTable.supersede_copies marks a copy `covered` when the request that went on holds all of it but at most its
last token (the model's last tokens of an answer re-rendered otherwise from its text: "fo" + "o" read back as
"foo"). a98cb2e's parking.kept_elsewhere then asked whether another context holds the copy's tokens exactly, so
such a copy was parked to the cache at every overwrite and at the stop, a second copy of the conversation beside
its longer history (the agent soak's 188.4 MiB copy beside its 191.8 MiB history evicted a 130.8 MiB conversation).

Real server, tiny model, one slot, a RAM cache, requests one at a time (each runs in main)."""

from __future__ import annotations

import random

from tests.server.live import LiveServer
from tests.server.test_superseded_copy_tail_parked import N, cache_parks, complete, tokens


def test_a_copy_held_but_for_its_last_token_is_overwritten_without_a_park(tiny_model):
    rng = random.Random(9)
    line = tokens(rng, 11, N)
    other_last = 10 if line[-1] != 10 else 11
    with LiveServer(model=str(tiny_model), ctx=4096, batch=1, slot_ctx=4096, threads=1,
                    conversation_cache_mib=256) as s:
        complete(s.url, line)
        complete(s.url, tokens(rng, 13, N))              # displaces main: the line is parked into slot 1
        slot = s.state.scheduler.table[1]
        assert slot.tokens == line
        # the conversation goes on in main with its last token read otherwise: it holds all of the copy but that
        assert complete(s.url, line[:-1] + [other_last] + tokens(rng, 12, 200)) >= N - 1
        assert slot.superseded and slot.covered
        before = cache_parks(s.url)
        complete(s.url, tokens(rng, 14, N))              # main's history goes into slot 1 over the copy
        assert slot.tokens[:N - 1] == line[:-1] and slot.tokens[N - 1] == other_last
        assert cache_parks(s.url) == before              # before: one more, the copy written beside its history


def test_of_two_as_long_covered_copies_differing_in_the_last_token_one_is_kept(tmp_path):
    """Two copies as long, alike but for the last token, each covered by a request since gone from the contexts:
    each holds all of the other but that token, so each was the other's holder and both were dropped. The first
    holds the second (held_by_another's order for two equal histories); the first is parked."""
    from types import SimpleNamespace

    from strata.server import parking
    from strata.server.cache import CacheConfig, ConversationCache
    from strata.server.cache.memory import FixedMemory
    from strata.server.slots import SlotTable

    from tests.cache.sim_engine import SimEngine, SimFormat

    engine = SimEngine(n_slots=2)
    cache = ConversationCache(CacheConfig.from_values({"conversation_cache_mib": 64,
                                                       "conversation_cache_sessions_dir": str(tmp_path / "s")}, {}),
                              engine, image_format=SimFormat, memory=FixedMemory(100_000))
    table = SlotTable(4096, 2, 4096, 1)
    line = tokens(random.Random(5), 11, 50)
    for ctx, last in ((1, 7), (2, 8)):
        table.set_tokens(ctx, line[:-1] + [last])
        table[ctx].superseded = table[ctx].covered = True
    sched = SimpleNamespace(table=table, cache=cache, engine=engine)
    try:
        assert [parking.kept_elsewhere(sched, ctx) for ctx in (1, 2)] == [False, True]
    finally:
        cache.close(persist=False)
