"""A stop's lines count only the histories written: one that every disk level refuses is said as refused.

The spill writer's queue (captures parked to disk, drained at the stop) told each history done as it was taken
off the queue, written or not: a history too large for the cold level's whole budget was refused and discarded,
and the stop's last line still said it was kept ("keeping 2 conversations for the next start (2 of 2 written)"
with one of them lost). d0d4f0a made the last line say all written; now it says what was.

Real files, the simulated engine, RAM off and the cold level 1 MiB: one history of 960 KiB (its writes gated, so
it is still queued at the stop) and one of 1,280 KiB, which no level takes."""

from __future__ import annotations

import logging

from strata.server.stop_progress import StopProgress, progress_line

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_stop_progress_within_an_entry import DEADLINE_S, GatedIO, close_gated


def test_a_spill_every_level_refuses_is_said_refused_not_written(make_cache, caplog):
    io = GatedIO()
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, conversation_cache_mib=0,
                       conversation_cache_park="disk", conversation_cache_cold_mib=1)
    park_history(cache, history(2, 60))                # 960 KiB: queued, the writer waits at its first piece
    park_history(cache, history(3, 80))                # 1,280 KiB: more than the cold level's whole budget
    assert io.waiting.wait(DEADLINE_S)
    said = StopProgress(logging.getLogger("strata.test_stop"), every_s=0.0)
    with caplog.at_level(logging.INFO, logger="strata.test_stop"):
        calls = close_gated(cache, io, said)
    assert len(cache.cascade.levels[-1].entries) == 1 and cache.parks["discard"] == 1
    assert calls[0][:2] == (0, 2)                       # both queued: neither taken yet
    assert calls[-1] == (1, 1, -1, -1, 1), calls        # before: (2, 2, -1, -1), the refused one counted written
    last = caplog.records[-1].getMessage()
    assert last == "stopping: keeping 1 conversation for the next start (1 of 1 written; 1 refused by the disk, lost)"


def test_the_line_says_refused_ones_apart_only_when_there_are_some():
    assert progress_line(3, -1, -1, 3) == "stopping: keeping 3 conversations for the next start (3 of 3 written)"
    assert progress_line(2, 1 << 30, 2 << 30, 1, 1) == ("stopping: keeping 2 conversations for the next start "
                                                        "(1.0 of 2.0 GiB written; 1 refused by the disk, lost)")
