"""A cache hit whose files another server sharing the folder removed falls back to the next-best entry, not to
reading the whole prompt. In the crash, disk and restart trial (2026-12-06: two strata serve on one set of cache
folders) the second server's lookup chose a warm entry of 4,459 tokens the first had since superseded ("removed
since start-up ... unindexed") and read all 5,089 tokens of the prompt again (38 s on the 2-core VM), while other
entries it knew held a prefix of it. The lookup is now asked again (the gone entry is unindexed by then).

Real server, tiny model, main only, cold level only: P + X and P + Y are parked to cold (they share P), P + Y's files
are removed by hand, and P + Y + Z restores P from P + X."""

from __future__ import annotations

import os
import random

from tests.server.live import LiveServer, cold_only, complete, flip_bytes

P_N, TAIL_N = 1200, 600


def test_a_hit_removed_by_another_server_falls_back_to_the_next_best_entry(tiny_model, tmp_path):
    rng = random.Random(11)
    words = lambda n: [rng.randrange(10, 500) for _ in range(n)]   # noqa: E731
    p = [11] + words(P_N - 1)
    px, py, q = p + words(TAIL_N), p + words(TAIL_N), [12] + words(300)
    with LiveServer(**cold_only(tiny_model, tmp_path)) as s:
        for prompt in (px, py, q):                     # each parks the one before it to cold
            complete(s.url, prompt)
        cache = s.state.scheduler.cache
        cache.flush()
        cold = cache.cascade.levels[-1]
        held = {len(e.tokens): e for e in cold.entries.values()}
        assert len(px) in held and len(py) in held, sorted(held)
        gone = held[len(py)]
        os.remove(gone.sidecar_path)                   # another server's budget removed it
        os.remove(gone.image_path)
        usage = complete(s.url, py + words(50))
        # before: the gone hit was the only one tried and all of the prompt was read again (cached 0)
        assert usage["prompt_tokens_details"]["cached_tokens"] >= P_N - 1, usage
        assert gone.key not in cold.entries


def test_a_hit_damaged_at_its_start_falls_back_to_the_next_best_entry(tiny_model, tmp_path, caplog):
    """The trial's flipped system-prompt images: each was 'not restored, the prompt read again' (cached 0) with
    other entries holding a prefix of the prompt. A hit that restores nothing (damaged before its first whole chunk)
    is discarded, and the lookup is asked again as for a gone one."""
    rng = random.Random(12)
    words = lambda n: [rng.randrange(10, 500) for _ in range(n)]   # noqa: E731
    p = [11] + words(P_N - 1)
    px, py, q = p + words(TAIL_N), p + words(TAIL_N), [12] + words(300)
    with LiveServer(**cold_only(tiny_model, tmp_path)) as s:
        for prompt in (px, py, q):
            complete(s.url, prompt)
        cache = s.state.scheduler.cache
        cache.flush()
        cold = cache.cascade.levels[-1]
        held = {len(e.tokens): e for e in cold.entries.values()}
        damaged = held[len(py)]
        flip_bytes(damaged.image_path, 64)              # its header: nothing of it can be trusted
        with caplog.at_level("WARNING"):
            usage = complete(s.url, py + words(50))
        assert usage["prompt_tokens_details"]["cached_tokens"] >= P_N - 1, usage   # before: 0
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        # what the warnings say comes next: not "the prompt read again", which it no longer is
        assert any("looking for the next best entry" in m for m in said), said
        assert not any("prompt read again" in m for m in said), said
        assert cache.damaged == 1 and damaged.key not in cold.entries
