"""`strata replay` given a new user's mistakes, run as the user runs it (a subprocess): each is a message naming
the flag and what it takes, exit status 2, no traceback (a session-39 trial: `--policies ,` replayed the whole
timeline and then ended in `ValueError: max() arg is an empty sequence`; `--decode-tps nan`, `--prefill-tps inf`
and `--prompt-rate nan` printed a table as if they were rates)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def timeline(tmp_path) -> str:
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps({"conversation": c, "time": t, "prompt_tokens": n, "shared_tokens": s,
                                        "output_tokens": 10}) + "\n"
                            for c, t, n, s in [("A", 0, 1000, 0), ("B", 10, 300, 0), ("A", 20, 1500, 1100)]))
    return str(path)


def replay(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", "replay", *argv], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("argv, said", [
    (["--policies", ","], "--policies ',': expected at least one policy, from: lru, lcp-lru"),
    (["--policies", ""], "--policies '': expected at least one policy"),
    (["--decode-tps", "nan"], "--decode-tps nan: expected a finite number >= 0"),
    (["--prefill-tps", "inf"], "--prefill-tps inf: expected a finite number >= 0"),
    (["--prompt-rate", "nan"], "--prompt-rate nan: expected a finite number >= 0"),
    # `2,,4` was replayed as 2,4, and more groups than slots were taken where strata serve refuses them
    (["--slots", "2,,4"], "--slots '2,,4': item 2 is empty; expected whole numbers separated by commas"),
    (["--slots", "2,4,"], "--slots '2,4,': item 3 is empty"),
    (["--groups", "9"], "--groups 9 is more than --slots 2"),
    (["--slots", "4,2", "--groups", "3"], "--groups 3 is more than --slots 2"),
])
def test_a_mistake_is_a_message_and_status_2(tmp_path, argv, said):
    done = replay(timeline(tmp_path), "--slots", "2", *argv)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_the_same_command_with_good_values_replays(tmp_path):
    done = replay(timeline(tmp_path), "--slots", "2", "--policies", "lru,", "--decode-tps", "100", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["policy"] for r in json.loads(done.stdout)["results"]] == ["lru"]


def test_generate_keeps_a_file_already_there(tmp_path):
    """`strata replay generate --out F` wrote over F without a word: a timeline recorded from real traffic
    (`strata serve --timeline-out`) cannot be made again."""
    recorded = tmp_path / "recorded.jsonl"
    recorded.write_text(open(timeline(tmp_path)).read())
    before = recorded.read_bytes()
    done = replay("generate", "--hours", "0.1", "--out", str(recorded))
    assert done.returncode == 2, done.stderr
    assert f"--out {recorded}: a file is already there ({len(before)} bytes), kept; remove it first" in done.stderr
    assert recorded.read_bytes() == before
    empty = tmp_path / "empty.jsonl"
    empty.touch()                                                     # nothing in it to lose: written
    done = replay("generate", "--hours", "0.1", "--out", str(empty))
    assert done.returncode == 0 and empty.stat().st_size > 0, done.stderr


@pytest.mark.parametrize("where", ["no-such-folder/t.jsonl", "."])
def test_generate_into_a_path_it_cannot_write_is_status_2(tmp_path, where):
    done = replay("generate", "--hours", "0.1", "--out", str(tmp_path / where))
    assert done.returncode == 2 and "cannot write it" in done.stderr and "Traceback" not in done.stderr
