"""`strata replay` refuses a flag its form does not read (a new-user trial): `strata replay TRACE --hours 3
--seed 4 --out f.jsonl` replayed the trace, wrote no file and said nothing of the three flags; `strata replay
generate --slots 2` wrote a timeline and ignored the slots. Run as the user runs it: the `strata` command in a
process of its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def strata(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", "replay", *argv], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"conversation": c, "time": t, "prompt_tokens": n, "shared_tokens": s,
                                        "output_tokens": 10}) + "\n"
                            for c, t, n, s in [("A", 0, 1000, 0), ("B", 5, 300, 0), ("A", 9, 1500, 1010)]))
    return path


def test_generate_flags_with_a_timeline_are_refused_and_nothing_is_written(tmp_path, trace):
    out = tmp_path / "gen.jsonl"
    done = strata(str(trace), "--slots", "2", "--hours", "3", "--seed", "4", "--out", str(out))
    assert done.returncode == 2, done
    assert "--hours, --seed, --out: options of `strata replay generate`" in done.stderr, done.stderr
    assert done.stdout == "" and not out.exists()


def test_replay_flags_with_generate_are_refused(tmp_path):
    out = tmp_path / "gen.jsonl"
    done = strata("generate", "--hours", "0.1", "--slots", "2", "--json", "--out", str(out))
    assert done.returncode == 2, done
    assert "--slots, --json: options of a replay" in done.stderr, done.stderr
    assert not out.exists()


def test_each_form_with_its_own_flags_still_runs(tmp_path, trace):
    out = tmp_path / "gen.jsonl"
    made = strata("generate", "--hours", "0.1", "--seed", "3", "--out", str(out))
    assert made.returncode == 0 and out.stat().st_size > 0, made
    replayed = strata(str(out), "--slots", "2", "--policies", "lru", "--json")
    assert replayed.returncode == 0, replayed
    assert json.loads(replayed.stdout)["results"][0]["slots"] == 2
    # a flag typed with its default value is not refused (it cannot be told from one not typed)
    assert strata(str(trace), "--slots", "2", "--policies", "lru", "--hours", "8").returncode == 0
