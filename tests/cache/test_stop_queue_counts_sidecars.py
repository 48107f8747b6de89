"""A clean stop's plan for the spill queue (stop_writes.unkept_at_stop) weighs each history as the last disk level
counts it once written, image and sidecar (session 42, item A). It weighed the images alone: two queued histories
whose images fill cold's budget with a few bytes to spare were both written, and the second's sidecar made its write
evict the first, within the same stop (a wasted write), while the stop's lines counted it.

Real files, the simulated engine (16,000 bytes a token, as test_hand_down_counts_sidecars), no RAM level (parks go
to the queue); the images written counted."""

from __future__ import annotations

import pytest
from strata.server.cache.stop_writes import unkept_at_stop

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_stop_writes_only_kept import CountingIO

MIB = 1 << 20


def test_the_queue_plan_leaves_out_what_the_sidecars_push_out(make_cache, clock):
    io = CountingIO()
    make = dict(engine=SimEngine(piece_bytes=PIECE, bytes_per_token=16000), conversation_cache_mib=0,
                conversation_cache_park="disk", conversation_cache_cold_mib=2)
    cache = make_cache(io=io, **make)
    with cache.stop_writes():
        for seed, n in enumerate([65, 66]):   # the older first
            assert park_history(cache, history(seed, n)).destination == "disk"
            clock.t += 1.0
        images = [e.n_bytes for e in cache._pending.values()]
    assert sum(images) <= 2 * MIB < sum(images) + 2 * 700   # the sidecars tip it
    cache.close()
    cold = make_cache(**make).cascade.levels[-1]
    assert sorted(e.n_tokens for e in cold.entries.values()) == [66]
    assert len(io.images) == 1, io.images     # before: 2 written, the first evicted by the second's sidecar
    assert cache.stop_unwritten == 1


def test_counted_sizes_decide_the_first_in_first_out():
    budget = 2 * MIB
    sizes = [MIB - 100, MIB - 100]
    assert unkept_at_stop(sizes, [budget], [10 * MIB], when_full="evict") == {}
    unkept = unkept_at_stop(sizes, [budget], [10 * MIB], when_full="evict", counted=[MIB + 600, MIB + 600])
    assert list(unkept) == [0] and unkept[0].needs == (1,)
    assert "comes to 2.0 MiB" in unkept[0].why
    # a level above refuses by the image: one whose image fits warm's budget may go there, so not certain
    assert unkept_at_stop(sizes, [MIB - 100, budget], [10 * MIB] * 2, when_full="evict",
                          counted=[MIB + 600] * 2) == {}


@pytest.mark.parametrize("counted, why", [([1], "one value per history"), ([1, -1], "whole numbers"),
                                          ([1, 2.5], "whole numbers")])
def test_bad_counted_sizes_are_named(counted, why):
    with pytest.raises(ValueError, match=why):
        unkept_at_stop([1, 2], [10], [100], when_full="evict", counted=counted)
