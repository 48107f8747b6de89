"""Which of a stop's queued histories the last level lets go counts the room a later one frees by superseding a
shorter copy of its conversation: the copy leaves once its longer history is written (ParkingMixin._supersede),
and what arrives after that does not push the older ones out against it. 499656d's rule summed every history
queued after one, the superseded copies too, and left out a history the old order kept.

The queue here: X, then A (a conversation's earlier turn, still queued: the spill writer behind when the stop
came), B (A's conversation, longer), C. Cold 2 MiB: X + A + B fit, and once B supersedes A, X + B + C fit; all
four do not. Real files, the simulated engine (16 KiB a token), bare (as before) and inside cache.stop_writes."""

from __future__ import annotations

import pytest
from strata.server.cache.stop_writes import unkept_at_stop

from tests.cache.test_stop_unwritten_deletes_follow import TickingClock, run_stop

X, A, B, C = (5, 30), (7, 40), (7, 50), (8, 40)   # 480, 640, 800 (A's history and 10 tokens more), 640 KiB
SEED_OF = {X: "X", A: "A", B: "B", C: "C"}


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock()


def test_a_superseded_copy_frees_its_room_for_the_older_history(make_cache, clock, tmp_path):
    stop = [X, A, B, C]
    _, bare = run_stop(make_cache, clock, tmp_path / "bare", held=False, before=[], stop=stop)
    _, kept = run_stop(make_cache, clock, tmp_path / "held", held=True, before=[], stop=stop)
    assert bare == {5, 7, 8}                  # X, B and C: A superseded by B
    assert kept == bare                       # before the fix: {7, 8}, X left out


@pytest.mark.parametrize("sizes, replaced_by, unkept", [
    ([30, 40, 50, 40], [None, 2, None, None], set()),     # the test's queue (KiB / 16): A leaves as B arrives
    ([30, 40, 50, 40], None, {0, 1}),                     # without it, as 499656d summed
    ([30, 40, 50, 40, 40], [None, 2, None, None, None], {0, 2}),   # one more: X goes, then B (A left with B)
    ([60, 60, 60], [2, None, None], {0}),                 # replaced by the last: its write pushed out 0 first
    ([30, 40, 50, 40], [None, 3, None, None], {0, 1}),    # replaced by C: C's room is made first
])
def test_unkept_at_stop_with_replacements(sizes, replaced_by, unkept):
    kib = 1 << 14   # 16 KiB a token
    got = unkept_at_stop([s * kib for s in sizes], [128 * kib], [1 << 40], when_full="evict", replaced_by=replaced_by)
    assert set(got) == unkept


def test_replaced_by_names_bad_input():
    for bad, message in (([None], "one value per history"), ([0, None], "a later history"),
                         ([None, 5], "a later history")):
        with pytest.raises(ValueError, match=message):
            unkept_at_stop([1, 1], [10], [100], when_full="evict", replaced_by=bad)
