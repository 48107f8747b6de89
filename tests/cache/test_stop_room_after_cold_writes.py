"""A clean stop with a warm and a cold level lets go in warm what cold would evict anyway (df0f6fa) only once cold's
planned writes are on disk. Made before them, the let-go left a stop killed between the two (SIGKILL, a power cut,
the app's silence rule) with fewer histories on disk than the copy-down-first order it replaced ever had: RAM 3 MiB
(4-9), warm 2-3, cold 0-1 before the stop: 2 and 3 deleted at once left 2 histories on disk, where the old order
never went below the 4 there before the stop. Now cold's writes come first, then warm's room, then warm's writes:
the same images written (6, none copied down), never fewer than 4 on disk at any point.

Real files, the simulated engine; the histories on disk (sidecars in warm and cold) counted after every removal:
each is a point where a kill finds the least on disk."""

from __future__ import annotations

import glob
import os

from tests.cache.test_stop_plans_warm_and_cold import TwoVolumes, run


class CountsAfterRemovals(TwoVolumes):
    """TwoVolumes that counts the histories on disk (their sidecars in warm and cold) after each file removed."""

    def __init__(self) -> None:
        super().__init__()
        self.on_disk: list[int] = []

    def remove(self, path: str) -> None:
        super().remove(path)
        root = os.path.dirname(os.path.dirname(path))
        self.on_disk.append(sum(len(glob.glob(os.path.join(root, lvl, "strata-conv-*.json")))
                                for lvl in ("warm", "cold")))


def test_warm_lets_go_only_after_cold_s_writes(make_cache, clock):
    io = CountsAfterRemovals()
    written, outlook, cache, kept = run(make_cache, clock, 3, 10, io=io, mark=lambda: io.on_disk.clear())
    assert kept == {"warm": [8, 9], "cold": [4, 5, 6, 7]}, kept
    assert written == 6, written   # no write more than the let-go saved: none copied down
    assert io.on_disk and min(io.on_disk) >= 4, io.on_disk   # before: 2 (warm's 2 and 3 gone, cold not written yet)
