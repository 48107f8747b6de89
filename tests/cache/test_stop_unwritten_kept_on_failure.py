"""A stop's history left unwritten (cache.stop_writes) is held, its RAM copy kept, until the writes it was left for
have succeeded; where a later write of the stop fails, it is written after all. Before, it was dropped at its turn:
certain to go only if the later writes happened, and where one failed (EIO), the history the old order (write
everything) kept in cold was lost.

Real files, the simulated engine (16 KiB a token), cold 2 MiB alone (two 960 KiB histories); the image writes of
chosen histories fail (EIO) through the cache's FileIO, as tests/cache/test_stop_unwritten_deletes_follow.py makes
them. Each stop run bare (the old order: every history written) and inside cache.stop_writes (the scheduler's)."""

from __future__ import annotations

import errno
import logging

import pytest
from strata.server.cache.disk import conversation_key, tokens_array
from strata.server.cache.fileio import FileIO
from strata.server.cache.stop_writes import gone_for_good, unkept_at_stop, written_after_all

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_park_restore import continue_from_cache, fresh_continuation
from tests.cache.test_stop_writes_only_kept import TickingClock

N = 60   # tokens: 960 KiB, two fit in cold's 2 MiB


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock()


class FailingKeysIO(FileIO):
    """The image writes of the histories whose keys are in `fail` fail (EIO); the others are real."""

    def __init__(self) -> None:
        self.fail: set[str] = set()

    def open_new(self, path: str):
        if ".img." in path and any(k in path for k in self.fail):
            raise OSError(errno.EIO, "Input/output error", path)
        return super().open_new(path)


def options(root):
    return dict(conversation_cache_mib=0, conversation_cache_park="disk", conversation_cache_cold_mib=2,
                conversation_cache_warm_mib=0, conversation_cache_cold_dir=str(root / "cold"),
                conversation_cache_warm_dir=str(root / "warm"))


def run_stop(make_cache, root, seeds, failing, *, held: bool, sizes=None):
    """The stop parks `seeds`' histories (N tokens each), the writes of `failing` fail; returns the cache, the seeds
    cold holds after it, and the stop's last progress line; `sizes` gets each history's bytes."""
    io = FailingKeysIO()
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, **options(root))
    io.fail = {conversation_key(cache.identity, tokens_array(history(s, N))) for s in failing}
    lines = []

    def parks():
        for s in seeds:
            (sizes if sizes is not None else {})[s] = park_history(cache, history(s, N)).n_bytes
    if held:
        with cache.stop_writes():
            parks()
    else:
        parks()
    cache.close(progress=lambda *a: lines.append(a))
    seed_of = {tuple(history(s, N)): s for s in seeds}
    kept = {seed_of[tuple(int(t) for t in e.tokens)] for e in cache.cascade.levels[-1].entries.values()}
    return cache, kept, lines[-1]


def test_a_later_write_failing_writes_the_unwritten_history_after_all(make_cache, tmp_path, caplog):
    """2 is left unwritten for 3 and 4; 3's write fails: 2 is written after all, beside 4, as the old order kept
    it, and a restart restores it (before the fix: cold held 4 alone, 2 counted not written)."""
    _, bare, _ = run_stop(make_cache, tmp_path / "bare", [2, 3, 4], [3], held=False)
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        cache, kept, last = run_stop(make_cache, tmp_path / "held", [2, 3, 4], [3], held=True)
    assert bare == kept == {2, 4}                      # before the fix: kept {4}
    assert cache.stop_unwritten == 0 and cache.stop_unwritten_bytes == 0
    assert last[:2] == (2, 2)                          # the lines count it written (before: 1 of 1)
    said = [r.getMessage() for r in caplog.records if "written after all" in r.getMessage()]
    assert len(said) == 1 and "failed" in said[0] and "the 1 conversation (0.9 MiB)" in said[0], said
    assert not [r for r in caplog.records if "not written to the cold level" in r.getMessage()]
    again = make_cache(engine=SimEngine(piece_bytes=PIECE), **options(tmp_path / "held"))
    prompt = history(2, N) + [1, 300, 301]
    hit, res, out, read = continue_from_cache(again, prompt)
    assert hit.level == "cold" and res.n_tokens == N and read == 3
    assert out == fresh_continuation(prompt)


def test_the_write_they_were_left_for_failing_writes_only_what_cold_still_holds(make_cache, tmp_path):
    """2 is left out for 3 and 4, 3 for 4 and 5 (held until 5 is written: 2 goes only if 3 does); 5's write fails.
    Cold holds 4: had they been written, it would hold 3 beside it, and 2 would have gone for 4. So 3 is written
    after all, with its place's seal, and 2 is let go, not written (written too, 3 would have pushed it out). The
    old order let 3 go for 5's room before 5's write failed: cold kept 4 alone (before the fix, too)."""
    _, bare, _ = run_stop(make_cache, tmp_path / "bare", [2, 3, 4, 5], [5], held=False)
    cache, kept, _ = run_stop(make_cache, tmp_path / "held", [2, 3, 4, 5], [5], held=True)
    assert bare == {4} and kept == {3, 4}              # before the fix: kept {4}
    assert cache.stop_unwritten == 1 and cache.cascade.evictions["cold"] == 0   # 2 never written


def test_without_a_failure_the_held_histories_are_let_go_and_counted(make_cache, tmp_path, caplog):
    """No write fails: 2 and 3 are let go once 5 is written (each said, counted), never written."""
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        sizes = {}
        cache, kept, last = run_stop(make_cache, tmp_path / "held", [2, 3, 4, 5], [], held=True, sizes=sizes)
    assert kept == {4, 5} and last[:2] == (2, 2)
    assert (cache.stop_unwritten, cache.stop_unwritten_bytes) == (2, sizes[2] + sizes[3])
    assert not [r for r in caplog.records if "written after all" in r.getMessage()]
    assert len([r for r in caplog.records if "not written to the cold level" in r.getMessage()]) == 2
    assert not cache._pending and cache._stop is None  # nothing held past the stop


def test_a_history_refused_in_between_does_not_hold_it_back(make_cache, tmp_path, caplog):
    """7 (2,240 KiB) is larger than cold's whole budget: refused by plan, as before, it takes no room. 2 is left out
    for 3 and 4 and let go once they are written (the plan names the writes it needs: with every one after it
    needed, 7's refusal held it to the queue's end)."""
    sizes = {}
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), **options(tmp_path))
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        with cache.stop_writes():
            for s, n in [(2, N), (7, 140), (3, N), (4, N)]:
                sizes[s] = park_history(cache, history(s, n)).n_bytes
        cache.close()
    assert (cache.stop_unwritten, cache.stop_unwritten_bytes) == (1, sizes[2])
    assert len(cache.cascade.levels[-1].entries) == 2
    (said,) = [r.getMessage() for r in caplog.records if "not written to the cold level" in r.getMessage()]
    key = {s: conversation_key(cache.identity, tokens_array(history(s, n))) for s, n in [(2, N), (7, 140), (3, N), (4, N)]}
    assert "queue ended" not in said and key[7] not in said, said   # 7 takes no room there: not one that pushes it
    assert said.endswith(f"after it: with conversation {key[3]} (0.9 MiB) and then conversation {key[4]} (0.9 MiB) "
                         f"it comes to 2.8 MiB"), said
    assert not [r for r in caplog.records if "written after all" in r.getMessage()]


def test_the_unwritten_line_names_the_writes_that_push_it_out():
    """Session 38's soak: two histories in a row each pushed out by the next, nothing between. The line said "with the
    0.0 MiB the stop writes after it there and the 195.5 MiB of the next", and that next was itself not written. It
    names the later histories now, each left out one said so, and leaves out the empty part."""
    mib = 1 << 20
    sizes = [int(200.9 * mib), int(195.5 * mib), int(143.3 * mib)]
    unkept = unkept_at_stop(sizes, [100 * mib, 320 * mib], [1 << 40] * 2, when_full="evict", names=["A", "B", "C"])
    assert unkept[0].needs == (1,) and unkept[1].needs == (2,) and set(unkept) == {0, 1}
    assert unkept[0].why == ("the last disk level's budget of 320.0 MiB, which lets the oldest go first, would let it "
                             "go for the histories the stop queues there after it: with B (195.5 MiB, itself not "
                             "written: it goes in turn for later ones) it comes to 396.4 MiB")
    assert unkept[1].why.endswith("after it: with C (143.3 MiB) it comes to 338.8 MiB")
    between = unkept_at_stop([200 * mib, 50 * mib, 60 * mib, 150 * mib], [320 * mib], [1 << 40], when_full="evict")
    assert between[0].why.endswith("after it: with history 1 of the queue (50.0 MiB), history 2 of the queue "
                                   "(60.0 MiB) and then history 3 of the queue (150.0 MiB) it comes to 460.0 MiB")


@pytest.mark.parametrize("needs, written, gone, certain", [
    ({0: (1, 2)}, {1, 2}, set(), {0}),
    ({0: (1, 2)}, {1}, set(), set()),               # the arrival it leaves for not written (yet)
    ({0: (1, 2)}, {2}, set(), set()),               # one in between not written: its room was free
    ({0: (2,)}, {2}, set(), {0}),                   # 1 took no room in that level
    ({0: (1, 2), 1: (2, 3)}, {2, 3}, set(), {0, 1}),   # 1 certain first, then 0, which needed 1's room
    ({0: (1, 2), 1: (2, 3)}, {2}, set(), set()),    # 3 not written: neither
    ({0: (1, 2)}, {2}, {1}, {0}),                   # 1 already let go
])
def test_gone_for_good(needs, written, gone, certain):
    assert gone_for_good(needs, written, gone) == certain


@pytest.mark.parametrize("held, level, budget, start", [
    ([(1.0, 5)], [], 10, 0),                        # nothing newer: written
    ([(1.0, 5)], [(2.0, 5)], 10, 0),                # fits beside the newer one
    ([(1.0, 5)], [(2.0, 6)], 10, 1),                # the newer one fills the level: let go
    ([(1.0, 5)], [(0.5, 9)], 10, 0),                # an older one leaves first
    ([(1.0, 5), (2.0, 5)], [(3.0, 5)], 10, 1),      # the newest held fits, the one before it not
    ([(1.0, 2), (2.0, 9)], [], 10, 1),              # an older one goes once a newer one did not fit... (9 fits)
    ([(1.0, 2), (2.0, 9)], [(3.0, 2)], 10, 2),      # ...and once one does not, every older one went before it
    ([(1.0, 5), (2.0, 5)], [(3.0, 50)], 0, 0),      # no budget: all written
])
def test_written_after_all(held, level, budget, start):
    assert written_after_all(held, level, budget) == start


@pytest.mark.parametrize("call, message", [
    (lambda: gone_for_good({3: (3,)}, set()), "needs[3] must be indexes of later histories, got (3,)"),
    (lambda: gone_for_good({3: ()}, set()), "needs[3] must be indexes of later histories, got ()"),
    (lambda: unkept_at_stop([1, 2], [1], [None], when_full="evict", names=["a"]),
     "names must give one per history (2), got 1"),
    (lambda: written_after_all([], [], -1), "budget must be a whole number of bytes >= 0, got -1"),
    (lambda: written_after_all([(1.0, -5)], [], 5),
     "held must be (seal, whole number of bytes >= 0) pairs, got (1.0, -5)"),   # before: taken as room, 0
    (lambda: written_after_all([(1.0, 5)], [(2.0, 2.5)], 5),
     "level must be (seal, whole number of bytes >= 0) pairs, got (2.0, 2.5)"),
    (lambda: written_after_all([(2.0, 1), (1.0, 1)], [], 5),
     "held must be in queue order, each sealed after the one before, got [(2.0, 1), (1.0, 1)]"),
])
def test_stop_plans_name_bad_input(call, message):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) == message


class RaisingKeyIO(FailingKeysIO):
    """As FailingKeysIO (EIO for `fail`), and the image write of `broken`'s key raises an error no level catches
    (not an OSError: a bug, a codec's refusal), as the spill writer's catch-all sees one."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = ""

    def open_new(self, path: str):
        if self.broken and ".img." in path and self.broken in path:
            raise RuntimeError("broken write")
        return super().open_new(path)


def test_one_write_after_all_raising_leaves_the_others_written(make_cache, tmp_path, caplog):
    """2 is left out for 3 and 4, 3 for 4 and 5; 4's write fails (EIO): 2 and 3 are written after all, and 2's write
    raises. 3 is written still, 5 after it (before: the error ended _write_held, 3 stayed held in the queue's
    entries for ever, neither written nor counted; cold kept 5 alone)."""
    io = RaisingKeyIO()
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, **options(tmp_path))
    key = {s: conversation_key(cache.identity, tokens_array(history(s, N))) for s in (2, 3, 4, 5)}
    io.fail, io.broken = {key[4]}, key[2]
    with caplog.at_level(logging.INFO, logger="strata.cache"):
        with cache.stop_writes():
            for s in (2, 3, 4, 5):
                park_history(cache, history(s, N))
        lines = []
        cache.close(progress=lambda *a: lines.append(a))
    assert set(cache.cascade.levels[-1].entries) == {key[3], key[5]}
    assert not cache._pending and cache._stop is None          # nothing held past the stop
    assert cache.stop_unwritten == 0 and cache.spill_failures == 2   # 4 (EIO), 2 (raised)
    assert lines[-1][:2] == (2, 2), lines
    assert [r for r in caplog.records if r.getMessage() == f"stopping: the write after all of {key[2]} failed; not kept"]
