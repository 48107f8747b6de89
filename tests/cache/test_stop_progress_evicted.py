"""A stop's lines count what stays: a history the stop wrote and a later write of the same stop evicted (the disk
levels' budgets hold fewer than the conversations kept) is said apart, not kept; a prefix save queued beside the
histories (segment tier, system-prompt cache) is not a conversation.

Session 31's soak: the stop said "keeping 6 conversations for the next start (6 of 6 written)" while the levels
then kept 5: each history the spill writer's queue wrote was counted, one a later write pushed out too. Real files,
the simulated engine, histories of 960 KiB each, the spill writer's writes gated so they are queued at the stop."""

from __future__ import annotations

import logging

from strata.server.stop_progress import StopProgress, progress_line

from tests.cache.conftest import PIECE, conversation, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_stop_progress_within_an_entry import DEADLINE_S, GatedIO, close_gated

N_TOKENS = 60   # 960 KiB: two fit in a cold level of 2 MiB


def test_a_history_a_later_write_of_the_queue_evicts_is_not_kept(make_cache, caplog):
    io = GatedIO()
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, conversation_cache_mib=0,
                       conversation_cache_park="disk", conversation_cache_cold_mib=2)
    for seed in (1, 2, 3):
        park_history(cache, history(seed, N_TOKENS))   # queued: the writer waits at the first one's first piece
    assert io.waiting.wait(DEADLINE_S)
    said = StopProgress(logging.getLogger("strata.test_stop"), every_s=0.0)
    with caplog.at_level(logging.INFO, logger="strata.test_stop"):
        calls = close_gated(cache, io, said)
    assert len(cache.cascade.levels[-1].entries) == 2   # the oldest made room for the third
    assert calls[0][:2] == (0, 3)
    assert calls[-1] == (3, 2, -1, -1, 0, 1), calls      # before: (3, 3, -1, -1), the evicted one counted kept
    assert [c[1] for c in calls] == sorted((c[1] for c in calls), reverse=True)   # N never grows back
    last = caplog.records[-1].getMessage()
    assert last == ("stopping: keeping 2 conversations for the next start (3 of 3 written; 1 of them evicted by "
                    "the disk budget)")


def test_the_hand_down_counts_what_its_writes_evicted_of_the_queue_s(make_cache, clock, folders):
    """The queue's histories are written first, RAM's after: one the hand-down pushes out of the disk level leaves
    N too, and the last line speaks for the whole stop (the queue's histories and bytes with RAM's)."""
    io = GatedIO()
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, conversation_cache_mib=100,
                       conversation_cache_park="disk", conversation_cache_cold_mib=2)
    park_history(cache, history(1, N_TOKENS))           # to the queue
    assert io.waiting.wait(DEADLINE_S)
    cache.park_target = "ram"
    for seed in (2, 3):
        clock.t += 1.0
        assert park_history(cache, history(seed, N_TOKENS)).destination == "ram"
    queued = sum(e.n_bytes for e in cache._pending.values())
    handed = sum(e.n_bytes for e in cache.ram.entries.values())
    calls = close_gated(cache, io)
    assert len(cache.cascade.levels[-1].entries) == 2
    whole = queued + handed
    assert calls[-1] == (3, 2, whole, whole, 0, 1), calls   # before: (2, 2, handed, handed): the queue's left out
    assert [c[2] for c in calls if c[2] >= 0] == sorted(c[2] for c in calls if c[2] >= 0)


def test_a_prefix_save_in_the_queue_is_not_counted_a_conversation(make_cache):
    io = GatedIO()
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, conversation_cache_mib=0,
                       conversation_cache_park="disk", conversation_cache_cold_mib=100,
                       conversation_cache_system_prompt_mib=8)
    cache.opener = [1]
    park_history(cache, conversation(1, n_messages=6))   # the history, then its system prompt's save
    assert io.waiting.wait(DEADLINE_S)
    calls = close_gated(cache, io)
    assert len(cache.system_prompts.level.entries) == 1 and len(cache.cascade.levels[-1].entries) == 1
    assert calls[0][:2] == (0, 1) and calls[-1] == (1, 1, -1, -1), calls   # before: (0, 2) then (2, 2)


def test_the_line_says_evicted_ones_apart_only_when_there_are_some():
    assert progress_line(3, -1, -1, 3) == "stopping: keeping 3 conversations for the next start (3 of 3 written)"
    assert progress_line(2, -1, -1, 3, 0, 1) == ("stopping: keeping 2 conversations for the next start (3 of 3 "
                                                "written; 1 of them evicted by the disk budget)")
    assert progress_line(1, 1 << 30, 2 << 30, 1, 1, 2) == (
        "stopping: keeping 1 conversation for the next start (1.0 of 2.0 GiB written; 2 of them evicted by the disk "
        "budget; 1 refused by the disk, lost)")
