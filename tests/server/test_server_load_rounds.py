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


def test_a_level_in_which_no_answer_started_has_no_ttft(tiny_server):
    """A level whose deadline passes before any first token (a busy machine's warm-up, 4 clients' long prompts
    read together) reports no TTFT instead of failing the whole run on an empty median."""
    import argparse
    import asyncio

    args = argparse.Namespace(duration=1e-6, turns=1, system_tokens=8, max_tokens=4)
    level = asyncio.run(_load().load_level(tiny_server.url, 2, args, warmup=True))
    assert (level["clients"], level["tokens"], level["ttft_p50_ms"], level["ttft_p99_ms"]) == (2, 0, None, None)
