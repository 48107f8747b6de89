"""The stop hands RAM's histories to disk newest first where they all fit below RAM (its budget and its volume's
free space): which stay cannot depend on the order then, and a stop cut short (a closed Windows console window
gives it 5 s, the app ends one silent for 15 s, a kill) has written the conversations under way, not the oldest.
Each is still sealed in its own order, oldest first, so the next start's first-in-first-out is unchanged. Where
they do not all fit, only those the level keeps are written (stop_writes.hand_down_picks: the newest that fit), so
they all fit and are written newest first too; they were written oldest first, each write making its room from
the older ones the stop had just written."""

from __future__ import annotations

import os

from strata.server.cache.fileio import FileIO

from tests.cache.conftest import PIECE, history, park_history
from tests.cache.sim_engine import SimEngine


class Recording(FileIO):
    """Real file operations; the keys of the images opened for writing, in order."""

    def __init__(self) -> None:
        self.images: list[str] = []

    def open_new(self, path: str):
        name = os.path.basename(path)
        if name.startswith("strata-conv-") and ".img" in name:
            self.images.append(name[len("strata-conv-"):].split(".img", 1)[0])
        return super().open_new(path)


def parked_in_ram(make_cache, clock, io, cold_mib, lengths):
    cache = make_cache(engine=SimEngine(piece_bytes=PIECE), io=io, conversation_cache_mib=100,
                       conversation_cache_park="ram", conversation_cache_cold_mib=cold_mib)
    for seed, n in enumerate(lengths):
        assert park_history(cache, history(seed, n)).destination == "ram"
        clock.t += 1.0
    oldest_first = sorted(cache.ram.entries, key=lambda k: cache.ram.entries[k].sealed_at)
    return cache, oldest_first


def test_histories_that_all_fit_are_written_newest_first_and_sealed_oldest_first(make_cache, clock):
    io = Recording()
    cache, oldest_first = parked_in_ram(make_cache, clock, io, 100, [40, 42, 44, 46])
    cache.close()
    assert io.images == oldest_first[::-1]                     # before: oldest_first
    again = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=100)
    cold = again.cascade.levels[0]
    assert sorted(cold.entries, key=lambda k: cold.entries[k].sealed_at) == oldest_first


def test_histories_over_the_budget_are_written_only_where_kept_and_the_newest_stay(make_cache, clock):
    io = Recording()
    cache, oldest_first = parked_in_ram(make_cache, clock, io, 2, [40, 42, 44, 46, 48, 50, 52, 54])
    cache.close()
    assert io.images == oldest_first[-2:][::-1]                # before: all 8, oldest first, 6 of them let go
    again = make_cache(conversation_cache_mib=0, conversation_cache_cold_mib=2)
    assert sorted(again.cascade.levels[0].entries) == sorted(oldest_first[-2:])
