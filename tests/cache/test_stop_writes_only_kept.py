"""A clean stop writes only the histories the disk levels keep: one the last level would take and let go again
within the stop, first-in-first-out, for the ones written after it, is not written, and the levels end as the
writes would have left them (the same histories, in the same levels, in the same order).

Session 37's soak: the first stop wrote 685 MiB, 476 of them histories cold's 320 MiB let go within three seconds,
most of its 6.52 s. Real files, the simulated engine (16 KiB a token); each stop is run twice on fresh folders, its
parks inside cache.stop_writes (the scheduler's stop) and bare (as before), the image files written counted."""

from __future__ import annotations

import contextlib
import logging

import pytest
from strata.server.cache.fileio import FileIO
from strata.server.cache.stop_writes import unkept_at_stop

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_read_only_folder import read_only

MIB = 1 << 20
BIG, SMALL = 80, 30   # tokens: 1,280 KiB (over a 1 MiB warm level) and 480 KiB


class TickingClock:
    """A clock that moves on at every reading, as a real one does between writes (a standing one seals a stop's
    writes alike, and first-in-first-out falls back on the keys)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += 0.001
        return self.t


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock()


class CountingIO(FileIO):
    """Counts the image files written (opened new: a rename between levels on one volume opens none)."""

    def __init__(self) -> None:
        self.images: list[str] = []

    def open_new(self, path: str):
        if ".img." in path:
            self.images.append(path)
        return super().open_new(path)


def run_stop(make_cache, clock, root, before, stop, *, held: bool, warm_mib: int, cold_mib: int,
             around=contextlib.nullcontext):
    """`before` parked and written, then the stop's `stop` parked (each a (seed, tokens)) and the cache closed.
    Returns (images the stop wrote, {level: [seed of each entry, oldest first]}, the cache)."""
    io = CountingIO()
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, conversation_cache_mib=0,
                       conversation_cache_park="disk", conversation_cache_cold_mib=cold_mib,
                       conversation_cache_warm_mib=warm_mib, conversation_cache_cold_dir=str(root / "cold"),
                       conversation_cache_warm_dir=str(root / "warm"))
    for seed, n in before:
        clock.t += 1.0
        park_history(cache, history(seed, n))
        cache.flush()
    written_before = len(io.images)
    clock.t += 1.0

    def parks():
        for seed, n in stop:
            park_history(cache, history(seed, n))
    with around(root / "cold"):
        if held:
            with cache.stop_writes():
                parks()
        else:
            parks()
        cache.close()
    seed_of = {tuple(history(seed, n)): seed for seed, n in [*before, *stop]}
    held_by = {lvl.name: [seed_of[tuple(int(t) for t in e.tokens)]
                          for e in sorted(lvl.entries.values(), key=lambda e: (e.sealed_at, e.key))]
               for lvl in cache.cascade.levels}
    return len(io.images) - written_before, held_by, cache


def test_cold_alone_writes_only_the_histories_it_keeps(make_cache, clock, tmp_path, caplog):
    """Cold 2 MiB holds two 960 KiB histories: of a stop's five, three were written and let go; one written before
    the stop goes too, as it did."""
    before, stop = [(1, 60)], [(s, 60) for s in (2, 3, 4, 5, 6)]
    n_bare, bare, _ = run_stop(make_cache, clock, tmp_path / "bare", before, stop, held=False, warm_mib=0, cold_mib=2)
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        n_held, kept, cache = run_stop(make_cache, clock, tmp_path / "held", before, stop, held=True, warm_mib=0,
                                       cold_mib=2)
    assert bare == {"cold": [5, 6]} and n_bare == 5
    assert kept == bare and n_held == 2                       # before the change: 5 written, 3 of them let go
    assert cache.stop_unwritten == 3 and cache.cascade.evictions["cold"] == 1   # the one from before the stop
    said = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
    assert len(said) == 4 and "the last disk level's budget of 2.0 MiB, which lets the oldest go first" in said[0]
    # 2 is pushed out by 3 and 4, both left out in turn (said so: no write of theirs happens either)
    assert said[0].count("(0.9 MiB, itself not written: it goes in turn for later ones)") == 2, said
    assert said[-1].startswith("stopping: 3 conversations (2.8 MiB) not written"), said


def test_warm_handing_down_to_cold_ends_as_the_writes_would(make_cache, clock, tmp_path):
    """Warm 1 MiB (two small histories), cold 3 MiB (two big ones and a small): the big ones go to cold at once, each
    small one pushes warm's oldest down to cold between them. Only big 22 and 24 (its last two) are written."""
    before = [(10, SMALL), (11, SMALL), (12, BIG)]            # warm 10, 11; cold 12
    stop = [(20, BIG), (21, SMALL), (22, BIG), (23, SMALL), (24, BIG), (25, BIG)]
    n_bare, bare, _ = run_stop(make_cache, clock, tmp_path / "bare", before, stop, held=False, warm_mib=1, cold_mib=3)
    n_held, kept, cache = run_stop(make_cache, clock, tmp_path / "held", before, stop, held=True, warm_mib=1,
                                   cold_mib=3)
    assert kept == bare, (kept, bare)
    assert bare == {"warm": [21, 23], "cold": [11, 24, 25]}, bare
    assert (n_bare, n_held) == (6, 4)    # 20 and 22 not written; the small ones as before
    assert cache.stop_unwritten == 2


def test_a_budget_of_the_whole_queue_or_over_a_level_writes_all(make_cache, clock, tmp_path):
    """Where cold keeps them all, and for a history larger than the whole cold budget (refused, lost, as before),
    nothing is left out."""
    stop = [(2, 60), (3, 60)]
    n, kept, cache = run_stop(make_cache, clock, tmp_path / "a", [], stop, held=True, warm_mib=0, cold_mib=2)
    assert (n, kept, cache.stop_unwritten) == (2, {"cold": [2, 3]}, 0)
    stop = [(2, 60), (3, 140), (4, 60)]   # 2,240 KiB: over cold's 2 MiB
    n, kept, cache = run_stop(make_cache, clock, tmp_path / "b", [], stop, held=True, warm_mib=0, cold_mib=2)
    assert (kept, cache.stop_unwritten) == ({"cold": [2, 4]}, 0)


def test_a_read_only_cold_level_ends_as_it_was(make_cache, clock, tmp_path):
    """Cold turned read-only before the stop: what it held stays (its files cannot be removed), nothing is written,
    left out or not; no error escapes the stop."""
    before, stop = [(1, 60), (2, 60)], [(s, 60) for s in (3, 4, 5)]
    n_bare, bare, _ = run_stop(make_cache, clock, tmp_path / "bare", before, stop, held=False, warm_mib=0, cold_mib=2,
                               around=read_only)
    n_held, kept, _ = run_stop(make_cache, clock, tmp_path / "held", before, stop, held=True, warm_mib=0, cold_mib=2,
                               around=read_only)
    assert bare == kept == {"cold": [1, 2]} and n_held <= n_bare


@pytest.mark.parametrize("sizes, budgets, free, when_full, unkept", [
    ([5, 5, 5, 5], [10], [100], "evict", {0, 1}),
    ([5, 5, 5, 5], [0], [100], "evict", set()),                 # no budget: all kept
    ([5, 5, 5, 5], [10], [100], "reject", set()),               # refused, not let go: not certain
    ([5, 5, 5, 5], [10], [19], "evict", set()),                 # the volume decides first
    ([5, 5, 5, 5], [10], [None], "evict", set()),
    ([5, 11, 5, 5], [10], [100], "evict", {0}),                 # 11 is refused: it pushes nothing out
    ([6, 2, 6, 2, 6], [4, 12], [100, 100], "evict", {0}),       # the 2s go to warm: their way down is not certain
    ([6, 6, 6], [0, 12], [100, 100], "evict", set()),           # warm without a budget takes them all
])
def test_unkept_at_stop(sizes, budgets, free, when_full, unkept):
    assert set(unkept_at_stop(sizes, budgets, free, when_full=when_full)) == unkept


@pytest.mark.parametrize("kw, message", [
    (dict(sizes=[-1], budgets=[1], free=[1], when_full="evict"), "sizes must be whole numbers of bytes >= 0, got -1"),
    (dict(sizes=[1], budgets=[1.5], free=[1], when_full="evict"), "budgets must be whole numbers of bytes >= 0, got 1.5"),
    (dict(sizes=[1], budgets=[1], free=[], when_full="evict"), "free must give one value per level (1), got 0"),
    (dict(sizes=[1], budgets=[1], free=[1], when_full="drop"), "when_full must be 'evict' or 'reject', got 'drop'"),
])
def test_unkept_at_stop_names_bad_input(kw, message):
    with pytest.raises(ValueError) as e:
        unkept_at_stop(kw.pop("sizes"), kw.pop("budgets"), kw.pop("free"), **kw)
    assert str(e.value) == message
