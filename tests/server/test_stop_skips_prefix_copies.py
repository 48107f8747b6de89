"""A clean stop does not write a context's history that another context holds whole (a slot's older copy of
the conversation main went on with): the longer one serves every prompt the shorter would, and writing both
took disk budget from another conversation. An agent soak (benchmarks/RESULTS.md, "Agent soak") stopped with
a 188.4 MiB copy that was a prefix of a 191.8 MiB history beside it: written first into a 320 MiB cold level,
it evicted a 130.8 MiB conversation, then was itself superseded, and that conversation's next turn after the
restart read its 5,913-token history again.

Real server, tiny model (256 bytes of KV a token), one slot, no RAM level (every park is written to disk, as histories larger than the
RAM budget are), cold 2 MiB: two 3,000-token
histories fit, three do not."""

from __future__ import annotations

import random

from tests.server.live import LiveServer
from tests.server.test_superseded_copy_tail_parked import complete, tokens

N = 3000


def retry_first_turn(s: LiveServer, x: list[int], z: list[int], x2: list[int]) -> None:
    """x, another conversation z, x's second turn x2, then x again (a retry): main holds x, slot 1 x2, z is cold."""
    complete(s.url, x)
    complete(s.url, z)             # x is parked into slot 1
    complete(s.url, x2)            # z to the cold level; x goes on in main
    complete(s.url, x)             # the first turn again (a retry): x2 goes into slot 1, main holds x
    table = s.state.scheduler.table
    assert table.main.tokens == x and table[1].tokens == x2


def test_the_stop_keeps_both_conversations_not_a_copy(tiny_model, tmp_path):
    rng = random.Random(9)
    x, z = tokens(rng, 11, N), tokens(rng, 12, N)
    x2 = x + tokens(rng, 13, 100)
    flags = dict(model=str(tiny_model), ctx=4096, batch=1, slot_ctx=4096, threads=1, conversation_cache_mib=0,
                 conversation_cache_cold_dir=str(tmp_path / "cold"), conversation_cache_cold_mib=2)
    with LiveServer(**flags) as s:
        retry_first_turn(s, x, z, x2)
    with LiveServer(**flags) as s:
        assert complete(s.url, x2 + tokens(rng, 14, 20)) >= N + 100
        assert complete(s.url, z + tokens(rng, 15, 20)) >= N       # before: 0, z evicted by x's copy


def test_a_history_whose_holder_no_disk_level_takes_is_written(tiny_model, tmp_path):
    """The slot's history (6,600 tokens, 1.6 MiB) is larger than the cold level's whole budget (1 MiB): its write at
    the stop is refused, so main's first turn again (a retry), a prefix of it, is written instead of skipped
    (before: neither kept, the next start's continuation of it reused 0)."""
    rng = random.Random(9)
    x, z = tokens(rng, 11, N), tokens(rng, 12, N)
    x2 = x + tokens(rng, 13, 3600)
    flags = dict(model=str(tiny_model), ctx=8192, batch=1, slot_ctx=8192, threads=1, conversation_cache_mib=0,
                 conversation_cache_cold_dir=str(tmp_path / "cold"), conversation_cache_cold_mib=1)
    with LiveServer(**flags) as s:
        retry_first_turn(s, x, z, x2)
        assert s.state.cache.disk_takes(0) and not s.state.cache.disk_takes(1)
    with LiveServer(**flags) as s:
        assert complete(s.url, x + tokens(rng, 14, 20)) >= N - 1
