"""benchmarks/server_load.py's rounds: the 4/1 ratio is taken within each round (so a machine that
drifts between rounds does not tilt it), and a bad --rounds is refused. Not a speed test."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "server_load.py"


def _load():
    spec = importlib.util.spec_from_file_location("server_load", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ratios_are_taken_within_each_round():
    levels = [{"round": 0, "clients": 1, "tok_per_s": 100.0}, {"round": 0, "clients": 4, "tok_per_s": 250.0},
              {"round": 1, "clients": 4, "tok_per_s": 120.0}, {"round": 1, "clients": 1, "tok_per_s": 50.0},
              {"round": 2, "clients": 1, "tok_per_s": 80.0}]           # round 2 has no 4-client level
    assert _load().round_ratios(levels, 4, 1) == [2.5, 2.4]


def test_zero_rounds_is_refused():
    r = subprocess.run([sys.executable, str(BENCH), "--rounds", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--rounds must be at least 1, got 0" in r.stderr
