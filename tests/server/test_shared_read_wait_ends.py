"""context_choice.waits_for_shared_read, once a request waits for another's read of their common start (6113f10):
it waits while that read is short of the shared part, however close, and never past the read's own end: a read that
ended (cancelled, failed, answered: its row gone) or went on to generate lets it go at once, so no wait outlives
the read it waits for. Real Jobs, Rows and SlotTable; no engine (the function reads only these)."""

from __future__ import annotations

from strata.engine.sampling import SamplingParams
from strata.server.context_choice import SHARED_READ_WAIT_MIN, waits_for_shared_read
from strata.server.jobs import Job, StopMatcher
from strata.server.row import Row
from strata.server.slots import SlotTable

SHARED = list(range(10, 10 + 3 * SHARED_READ_WAIT_MIN))      # the common start: 1,536 tokens


def job(own: list[int]) -> Job:
    return Job(api="anthropic", prompt=SHARED + own, max_tokens=8, sampling=SamplingParams())


def reading(j: Job, pos: int, ctx: int = 1) -> Row:
    return Row(job=j, ctx=ctx, max_tokens=8, sampler=None, decoder=None, stopper=StopMatcher(()), pos=pos)


def test_the_wait_lasts_until_the_read_passes_the_shared_part_then_ends():
    table = SlotTable(n_ctx=8192, n_slots=2, slot_ctx=4096, n_groups=1)
    first, second = job([1, 2, 3]), job([4, 5])
    row = reading(first, pos=0)
    assert waits_for_shared_read(table, [row], second) and second.waits_for_read == first.id
    for pos in (len(SHARED) - SHARED_READ_WAIT_MIN, len(SHARED) - 1):   # within 512 of it: still waits (before:
        row.pos = pos                                                    # let go here, 511 tokens read twice)
        assert waits_for_shared_read(table, [row], second), pos
    row.pos = len(SHARED)
    assert not waits_for_shared_read(table, [row], second)


def test_a_read_that_ends_or_generates_lets_the_waiter_go():
    table = SlotTable(n_ctx=8192, n_slots=2, slot_ctx=4096, n_groups=1)
    first, second = job([1, 2, 3]), job([4, 5])
    row = reading(first, pos=100)
    assert waits_for_shared_read(table, [row], second)
    assert not waits_for_shared_read(table, [], second)          # cancelled or failed: its row is gone
    row.phase = "decode"
    assert not waits_for_shared_read(table, [row], second)       # its prompt read (a prompt no longer than ours)


def test_a_waiter_whose_read_ended_waits_for_another_read_of_it():
    table = SlotTable(n_ctx=8192, n_slots=3, slot_ctx=4096, n_groups=1)
    first, second, third = job([1]), job([2]), job([3])
    assert waits_for_shared_read(table, [reading(first, pos=10)], third) and third.waits_for_read == first.id
    assert waits_for_shared_read(table, [reading(second, pos=10, ctx=2)], third)   # the first read gone
    assert third.waits_for_read == second.id
