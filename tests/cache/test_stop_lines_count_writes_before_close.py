"""A stop's lines count the writes of its queue made before the cache's close began, too.

tests/server/test_stop_progress_evicted_live.py failed now and then under load ("keeping 1 conversation for the next
start (1 of 1 written)" while cold held 2): the scheduler's stop parks the contexts' histories and releases the
spill writer (cache.stop_writes), the cache's close comes later (the app's lifecycle, off the event loop), and its
lines counted only the keys the writer took once the close's flush had begun; a history written in between was in
cold but not in N, and an eviction in between was not said. Real files, the simulated engine (16 KiB a token), cold
2 MiB alone (two 960 KiB histories); the writer is let drain the whole queue before the close, the widest the gap."""

from __future__ import annotations

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine

N = 60   # tokens: 960 KiB, two fit in cold's 2 MiB


def stop_then_close(make_cache, root, seeds, *, held: bool):
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=0, conversation_cache_park="disk",
                       conversation_cache_cold_mib=2, conversation_cache_warm_mib=0,
                       conversation_cache_cold_dir=str(root / "cold"), conversation_cache_warm_dir=str(root / "warm"))
    if held:
        with cache.stop_writes():
            for s in seeds:
                park_history(cache, history(s, N))
    else:   # the writer's own order (every history written), still inside the stop's mark
        with cache.stop_writes():
            cache._plan_stop_writes = lambda: None
            for s in seeds:
                park_history(cache, history(s, N))
    cache._spill.flush()   # the writer drains the queue before the close begins
    lines: list[tuple] = []
    cache.close(progress=lambda *a: lines.append(a))
    return cache, lines


def test_writes_before_the_close_are_counted(make_cache, tmp_path):
    """2, 3 left out (cache.stop_writes), 4 and 5 written before the close: 'keeping 2 (2 of 2 written)'. Before:
    the close's flush saw no key taken and said nothing of them (no line at all, or 0 of 0)."""
    cache, lines = stop_then_close(make_cache, tmp_path, [2, 3, 4, 5], held=True)
    assert len(cache.cascade.levels[-1].entries) == 2
    assert lines and lines[-1][:2] == (2, 2), lines


def test_an_eviction_before_the_close_is_said(make_cache, tmp_path):
    """Every history written (no plan): 4 written, the first two evicted by the later ones before the close: N is
    what cold holds, the two evicted said apart (CloseProgress.left told from the stop's start)."""
    cache, lines = stop_then_close(make_cache, tmp_path, [2, 3, 4, 5], held=False)
    assert len(cache.cascade.levels[-1].entries) == 2
    assert lines and lines[-1] == (4, 2, -1, -1, 0, 2), lines


def test_the_first_line_leaves_out_what_the_plan_does_not_write(make_cache, tmp_path):
    """The close begins before the writer takes any of the queue: its first line already says the 2 conversations
    that stay (2 and 3 left out by the plan), as every later one does. Before: 'keeping 4 conversations ... (0 of 4
    written)', then 'keeping 2 ... (2 of 2 written)' as each left-out one was taken at its turn (session 39's soak:
    'keeping 3 ... (0 of 3 written)', then 'keeping 1 ... (1 of 1 written)')."""
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=0, conversation_cache_park="disk",
                       conversation_cache_cold_mib=2, conversation_cache_warm_mib=0,
                       conversation_cache_cold_dir=str(tmp_path / "cold"),
                       conversation_cache_warm_dir=str(tmp_path / "warm"))
    spill = cache._spill
    spill.release = lambda: None   # the writer stays held past the stop's parks: the close comes first
    with cache.stop_writes():
        for s in [2, 3, 4, 5]:
            park_history(cache, history(s, N))
    del spill.release
    lines: list[tuple] = []

    def progress(*a):
        lines.append(a)
        spill.release()   # the first line said, the writer goes on

    cache.close(progress=progress)
    assert len(cache.cascade.levels[-1].entries) == 2
    assert lines and {a[1] for a in lines} == {2}, lines
