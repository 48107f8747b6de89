"""The stop's "keeping N conversations" counts the histories that reach the disk. A history parked after a longer
one of the same conversation (main's older copy, parked at the stop after the slot holding the newer turn) stays in
RAM beside it; the longer one is written first and supersedes it, so it is never written: N (and the bytes) counted
it all the same, one conversation more than the folder held after the stop."""

from __future__ import annotations

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine


def images(folder) -> list[str]:
    return sorted(p.name for p in folder.glob("strata-conv-*.img"))


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
    assert calls[0][:2] == (0, 1) and calls[-1] == (1, 1, older, older), calls
    assert [c[2] for c in calls] == sorted(c[2] for c in calls)
