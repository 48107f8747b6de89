"""The stop's "keeping N conversations" counts the histories that reach the disk. A history parked after a longer
one of the same conversation (main's older copy, parked at the stop after the slot holding the newer turn) stays in
RAM beside it; the longer one is written first and supersedes it, so it is never written: N (and the bytes) counted
it all the same, one conversation more than the folder held after the stop."""

from __future__ import annotations

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.conftest import conversation_images as images
from tests.cache.sim_engine import SimEngine


def test_n_is_the_conversations_written_when_an_older_copy_is_superseded(make_cache, clock, folders):
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100,
                       conversation_cache_park="ram", conversation_cache_cold_mib=100)
    for tokens in (history(1, 60), history(1, 40), history(2, 30)):   # the newer turn first, then its older copy
        assert park_history(cache, tokens).destination == "ram"
        clock.t += 1.0
    assert len(cache.ram.entries) == 3
    kept_bytes = sum(e.n_bytes for e in cache.ram.entries.values() if e.n_tokens != 40)
    calls: list[tuple[int, int, int, int]] = []
    cache.close(progress=lambda *a: calls.append(a))
    written = images(folders["cold"])
    assert len(written) == 2, written
    assert {c[1] for c in calls} == {2}, calls                 # every line says 2, as the folder holds
    assert calls[0] == (0, 2, 0, kept_bytes) and calls[-1] == (2, 2, kept_bytes, kept_bytes), calls
    assert [c[2] for c in calls] == sorted(c[2] for c in calls)
    assert cache.superseded == 1


def test_the_older_copy_is_kept_and_counted_when_the_newer_cannot_be_written(make_cache, clock, folders):
    """Where the longer history is refused (over the disk level's budget), the older copy is what the next start
    finds: written, and counted in its place (the lost one leaves N, the copy joins it)."""
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100,
                       conversation_cache_park="ram", conversation_cache_cold_mib=1)
    for tokens in (history(1, 100), history(1, 50)):   # 1.6 MiB, over the budget; 0.8 MiB
        assert park_history(cache, tokens).destination == "ram"
        clock.t += 1.0
    older = next(e.n_bytes for e in cache.ram.entries.values() if e.n_tokens == 50)
    calls: list[tuple[int, int, int, int]] = []
    cache.close(progress=lambda *a: calls.append(a))
    assert len(images(folders["cold"])) == 1
    # the lost one said apart, as refused (its 5th value), not among the one kept
    assert calls[0][:2] == (0, 1) and calls[-1] == (1, 1, older, older, 1), calls
    assert [c[2] for c in calls] == sorted(c[2] for c in calls)


def test_a_disk_budget_at_the_stop_keeps_the_newest_histories_and_n_counts_what_stays(make_cache, clock, folders):
    """The stop writes RAM's histories oldest first; where the last disk level's budget holds only some, each
    write makes room by first-in-first-out. All were sealed at the stop's one `now`, so that order fell back on
    the keys: an agent trial's stop said "keeping 16 conversations", kept 9, and let the newest chat and
    Responses histories go while older copies stayed. Now the newest stay, and the last line counts them."""
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100,
                       conversation_cache_park="ram", conversation_cache_cold_mib=2)
    lengths = [40, 42, 44, 46, 48, 50, 52, 54]              # 0.64-0.86 MiB each: the newest two fit in 2 MiB
    for seed, n in enumerate(lengths):
        assert park_history(cache, history(seed, n)).destination == "ram"
        clock.t += 1.0
    sizes = {e.n_tokens: e.n_bytes for e in cache.ram.entries.values()}
    calls: list[tuple[int, int, int, int]] = []
    cache.close(progress=lambda *a: calls.append(a))
    reopened = make_cache(engine=SimEngine(piece_bytes=PIECE), conversation_cache_mib=100,
                          conversation_cache_cold_mib=2)
    cold = next(lvl for lvl in reopened.cascade.levels if lvl.name == "cold")
    kept = sorted(e.n_tokens for e in cold.entries.values())
    assert kept == [52, 54], kept
    # only the 2 that stay are written (stop_writes.hand_down_picks; before: all 8, 6 of them evicted by the budget
    # for the newer ones within the stop), and every line's N is those 2
    both = sizes[52] + sizes[54]
    assert calls[-1] == (2, 2, both, both), calls[-1]
    assert {c[1] for c in calls} == {2}, calls
