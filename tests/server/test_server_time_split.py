"""benchmarks/server_time_split.py's arithmetic: the engine-call log read per level, and the 4 / 1 ceiling."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import server_time_split as split  # noqa: E402


def test_calls_are_taken_by_their_end_inside_the_level(tmp_path):
    log = tmp_path / "calls.log"
    log.write_text("decode 1 1 0.005000 10.0000\n"
                   "decode 4 4 0.010000 11.0000\n"
                   "step 1+3 40 0.040000 12.5000\n"
                   "prefill 1 50 0.050000 20.0000\n")
    calls = split.calls_between(log, 10.5, 13.0)
    assert calls == [("decode", "4", 4, 0.01), ("step", "1+3", 40, 0.04)]
    summary = split.level_summary(calls + [("decode", "4", 4, 0.012)])
    assert list(summary) == ["step 1+3", "decode 4"]       # most seconds first
    assert summary["decode 4"] == {"calls": 2, "tokens": 8, "seconds": 0.022, "ms_per_call": 11.0}


def test_ceiling_by_hand():
    # decode only (p = 0): 4 rows at the cost of 2 rows -> 2x
    assert split.ceiling(5.0, 10.0, 0.0, 1.0) == pytest.approx(2.0)
    # session 36's quiet figures: d1 5.06, d4 9.82, p 0.6, c 1.0 ms -> (5.06 + 0.6) / (2.455 + 0.6)
    assert split.ceiling(5.06, 9.82, 0.6, 1.0) == pytest.approx(5.66 / 3.055)
    # the d4 the ratio needs gives that ratio back
    d4 = split.needed_d4(5.06, 0.6, 1.0, 2.5)
    assert d4 == pytest.approx(6.656)
    assert split.ceiling(5.06, d4, 0.6, 1.0) == pytest.approx(2.5)
