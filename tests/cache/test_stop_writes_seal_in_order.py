"""Histories the spill writer writes are sealed in the order written, also where the clock reads the same for two
writes (a coarse clock: Python before 3.13 reads Windows' to 15.6 ms, in which a small history is written): tied,
the last level's first-in-first-out fell back on the keys and let a newer one go before an older one. So a stop
(its contexts least recently used first, 1cb2ba3) kept an earlier conversation and lost a later one, and 499656d's
stop, which leaves out the ones first-in-first-out lets go, ended with other histories than the writes would have.

Real files, the simulated engine (16 KiB a token), cold 2 MiB (two 960 KiB histories), a clock that stands."""

from __future__ import annotations

import pytest

from tests.cache.test_stop_unwritten_deletes_follow import run_stop


class StandingClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("seeds", [(2, 3, 4), (4, 3, 2), (3, 2, 4), (5, 6, 7), (7, 6, 5)])
def test_a_stop_under_a_standing_clock_keeps_the_last_written(make_cache, tmp_path, seeds):
    stop = [(s, 60) for s in seeds]
    _, bare = run_stop(make_cache, StandingClock(), tmp_path / "bare", held=False, before=[], stop=stop)
    _, kept = run_stop(make_cache, StandingClock(), tmp_path / "held", held=True, before=[], stop=stop)
    assert bare == kept == set(seeds[1:]), (bare, kept)   # before: bare {2, 4} for (2, 3, 4), the keys' order
