"""A stop's history left unwritten (cache.stop_writes) deletes nothing by itself: what the last level held before
the stop goes only as the later writes need its room, oldest first, as the old order's writes made it go. Deleted
up front (499656d's let_go_all), a stop killed (SIGKILL, power) or whose later writes failed left the user without
histories the old order still held: here cold's history from before the stop, which fits beside the stop's first.

Real files, the simulated engine (16 KiB a token), cold 2 MiB alone; each stop run bare (as before) and inside
cache.stop_writes (the scheduler's stop)."""

from __future__ import annotations

import errno
import json
import os

import pytest
from strata.server.cache.fileio import FileIO

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine
from tests.cache.test_stop_writes_only_kept import TickingClock

BEFORE = [(1, 30)]                           # 480 KiB: fits beside one 960 KiB history of the stop, not two
STOP = [(2, 60), (3, 60), (4, 60)]           # 960 KiB each: cold keeps the last two, 2 is left unwritten


@pytest.fixture
def clock() -> TickingClock:
    return TickingClock()


class WatchedIO(FileIO):
    """At each image write the stop begins, the histories whose files are in cold then (what a stop killed at
    that moment leaves); `fail`: those writes fail (EIO) instead."""

    def __init__(self, cold: str, seed_of: dict[tuple, int]) -> None:
        self.cold, self.seed_of = cold, seed_of
        self.watching = self.fail = False
        self.on_disk_at_writes: list[set[int]] = []

    def on_disk(self) -> set[int]:
        out = set()
        for name in os.listdir(self.cold):
            if name.endswith(".json"):
                with open(os.path.join(self.cold, name)) as f:
                    out.add(self.seed_of[tuple(json.load(f)["tokens"])])
        return out

    def open_new(self, path: str):
        if self.watching and ".img." in path:
            self.on_disk_at_writes.append(self.on_disk())
            if self.fail:
                raise OSError(errno.EIO, "Input/output error", path)
        return super().open_new(path)


def run_stop(make_cache, clock, root, *, held: bool, fail: bool = False, before=BEFORE, stop=STOP, names=None):
    """Returns the IO (what was on disk at each write) and the histories cold holds after the stop, each named by its
    seed or, where `names` has it, by names[(seed, tokens)]."""
    names = names or {}
    seed_of = {tuple(history(s, n)): names.get((s, n), s) for s, n in [*before, *stop]}
    (root / "cold").mkdir(parents=True)
    io = WatchedIO(str(root / "cold"), seed_of)
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, conversation_cache_mib=0,
                       conversation_cache_park="disk", conversation_cache_cold_mib=2, conversation_cache_warm_mib=0,
                       conversation_cache_cold_dir=str(root / "cold"), conversation_cache_warm_dir=str(root / "warm"))
    for s, n in before:
        clock.t += 1.0
        park_history(cache, history(s, n))
        cache.flush()
    clock.t += 1.0
    io.watching, io.fail = True, fail

    def parks():
        for s, n in stop:
            park_history(cache, history(s, n))
    if held:
        with cache.stop_writes():
            parks()
    else:
        parks()
    cache.close()
    return io, io.on_disk()


def test_a_stop_killed_after_an_unwritten_history_leaves_what_cold_held(make_cache, clock, tmp_path):
    """Where the stop's first write (3) begins, cold still holds 1, as it did where the old order's first write (2)
    began (a stop killed then keeps it); 1 leaves for 4's room, and the stop ends as the old order's."""
    bare_io, bare = run_stop(make_cache, clock, tmp_path / "bare", held=False)
    held_io, kept = run_stop(make_cache, clock, tmp_path / "held", held=True)
    assert bare == kept == {3, 4}
    assert bare_io.on_disk_at_writes == [{1}, {2}, {3}]   # 1 left for 3's room, 2 for 4's (room made, then written)
    assert held_io.on_disk_at_writes == [{1}, {3}]        # before the fix: [set(), {3}]


def test_the_writes_after_an_unwritten_history_failing_leave_what_cold_held(make_cache, clock, tmp_path):
    """Every write of the stop fails (EIO): the old order kept cold's history from before the stop, and so does the
    stop that left 2 unwritten (before the fix: deleted, and nothing written)."""
    _, bare = run_stop(make_cache, clock, tmp_path / "bare", held=False, fail=True)
    _, kept = run_stop(make_cache, clock, tmp_path / "held", held=True, fail=True)
    assert bare == kept == {1}


def test_what_only_the_unwritten_history_pushed_out_stays(make_cache, clock, tmp_path):
    """2 (960 KiB) is let go for 3 and 4 (992 + 496 KiB); 1 (480 KiB) left for 3's room only because 2 took its
    share. Not written, 2 takes none: 1 stays beside 3 and 4 (the old order's end, and one history more)."""
    stop = [(2, 60), (3, 62), (4, 31)]
    _, bare = run_stop(make_cache, clock, tmp_path / "bare", held=False, stop=stop)
    _, kept = run_stop(make_cache, clock, tmp_path / "held", held=True, stop=stop)
    assert bare == {3, 4} and kept == {1, 3, 4}   # before the fix: {3, 4}


@pytest.mark.parametrize("fail", [False, True])
def test_a_shorter_copy_of_an_unwritten_history_stays_until_its_room_is_needed(make_cache, clock, tmp_path, fail):
    """Cold holds S, the first 30 tokens of X; X (60) is left unwritten for Y and Z. Its shorter copy S goes when
    Z needs its room, as X would have: a stop killed before (or whose writes fail) keeps S, as the old order kept X
    (or S) there; before the fix S was deleted as X was left out, and cold held nothing of that conversation."""
    names = {(2, 30): "S", (2, 60): "X", (3, 60): "Y", (4, 60): "Z"}
    before, stop = [(2, 30)], [(2, 60), (3, 60), (4, 60)]
    bare_io, bare = run_stop(make_cache, clock, tmp_path / "bare", held=False, fail=fail, before=before, stop=stop,
                             names=names)
    held_io, kept = run_stop(make_cache, clock, tmp_path / "held", held=True, fail=fail, before=before, stop=stop,
                             names=names)
    if fail:
        assert bare == kept == {"S"}                      # before the fix: held set()
        return
    assert bare == kept == {"Y", "Z"}
    assert bare_io.on_disk_at_writes == [{"S"}, {"X"}, {"Y"}]
    assert held_io.on_disk_at_writes == [{"S"}, {"Y"}]    # before the fix: [set(), {"Y"}]
