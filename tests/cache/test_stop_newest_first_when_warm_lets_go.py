"""A clean stop with a warm and a cold level lets go in warm what cold would evict anyway (df0f6fa), and still
writes the newest first: warm's picks (the most recently used), then cold's. A cold-first order (tried in session
43 so that a stop killed between the two had more older histories on disk) left a stop cut short (a closed console
window's 5 s, the app's silence rule, a kill) without the conversations under way, the ones worth keeping most.

RAM 3 MiB (4-9), warm 2-3, cold 0-1 before the stop; real files, the simulated engine; the images the stop writes
listed in order."""

from __future__ import annotations

import os

from tests.cache.test_stop_plans_warm_and_cold import TwoVolumes, run


class Marked(TwoVolumes):
    def __init__(self) -> None:
        super().__init__()
        self.stop_began = 0


def test_warm_s_picks_are_written_first_when_warm_lets_go(make_cache, clock):
    io = Marked()

    def mark() -> None:
        io.stop_began = len(io.images)

    written, outlook, cache, kept = run(make_cache, clock, 3, 10, io=io, mark=mark)
    assert kept == {"warm": [8, 9], "cold": [4, 5, 6, 7]}, kept
    assert written == 6, written   # none copied down: what cold would evict is let go in warm
    levels = [os.path.basename(os.path.dirname(p)) for p in io.images[io.stop_began:]]
    assert levels == ["warm"] * 2 + ["cold"] * 4, io.images[io.stop_began:]
