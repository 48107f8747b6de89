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
from strata.server.cache.stop_writes import gone_for_good

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


def test_the_write_they_were_left_for_failing_keeps_more_than_the_old_order(make_cache, tmp_path):
    """2 is left out for 4, 3 for 5 (2 also needs 3 in cold to go: held until 3 is certain); 5's write fails. The
    old order wrote 2 and 3, let 2 go for 4 and 3 for 5's room before 5's write failed: cold kept 4. Held, 2 and 3
    are written after all in their order, with their places' seals: 3 makes its room from 2, and cold keeps 3 and 4
    (before the fix: 4 alone, as the old order, the two counted not written)."""
    _, bare, _ = run_stop(make_cache, tmp_path / "bare", [2, 3, 4, 5], [5], held=False)
    cache, kept, _ = run_stop(make_cache, tmp_path / "held", [2, 3, 4, 5], [5], held=True)
    assert bare == {4} and kept == {3, 4}              # before the fix: kept {4}
    assert cache.stop_unwritten == 0


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


@pytest.mark.parametrize("left_at, written, gone, certain", [
    ({0: 2}, {1, 2}, set(), {0}),
    ({0: 2}, {1}, set(), set()),            # the arrival it leaves for not written (yet)
    ({0: 2}, {2}, set(), set()),            # one in between not written: its room was free
    ({0: 2, 1: 3}, {2, 3}, set(), {0, 1}),  # 1 certain first, then 0, which needed 1's room
    ({0: 2, 1: 3}, {2}, set(), set()),      # 3 not written: neither
    ({0: 2}, {2}, {1}, {0}),                # 1 already let go
])
def test_gone_for_good(left_at, written, gone, certain):
    assert gone_for_good(left_at, written, gone) == certain


def test_gone_for_good_names_bad_input():
    with pytest.raises(ValueError) as e:
        gone_for_good({3: 3}, set())
    assert str(e.value) == "left_at[3] must be the index of a later history, got 3"
