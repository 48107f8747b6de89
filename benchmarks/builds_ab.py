"""Builds alternated: a script's worker run for each of several _engine builds in its own subprocess, round after
round (on a shared machine only a comparison inside one run means anything), and the table of each build's best
over the rounds with the ratio of each later build to the first. Used by packed_ab.py and act_quant_ab.py
(higher is better in both)."""

from __future__ import annotations

import json
import subprocess
import sys


def alternate(script: str, builds: list[str], rounds: int, worker_args: list[str]) -> list[list[dict]]:
    """runs[i][r]: build i's worker result (a JSON object of name -> rate) in round r: `script --worker SO
    *worker_args` for each build in turn, `rounds` times."""
    runs: list[list[dict]] = [[] for _ in builds]
    for _ in range(rounds):
        for i, so in enumerate(builds):
            cmd = [sys.executable, script, "--worker", so, *worker_args]
            runs[i].append(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))
    return runs


def print_best(title: str, builds: list[str], runs: list[list[dict]], width: int, fmt: str) -> None:
    """Each key's best (highest) rate a build over the rounds, then each later build's ratio to the first."""
    print(title)
    for i, so in enumerate(builds):
        print(f"  [{i}] {so}")
    for key in runs[0][0]:
        best = [max(r[key] for r in runs[i]) for i in range(len(builds))]
        ratios = "  ".join(f"x{b / best[0]:.3f}" for b in best[1:])
        print(f"{key:{width}s} " + " ".join(format(b, fmt) for b in best) + f"  {ratios}")


def print_rounds(builds: list[str], runs: list[list[dict]], width: int) -> None:
    """Each key's ratio of each later build to the first, round by round (the builds ran side by side in a round)."""
    print("per round, later build / first:")
    for key in runs[0][0]:
        cols = [",".join(f"{runs[i][r][key] / runs[0][r][key]:.3f}" for r in range(len(runs[0]))) for i in range(1, len(builds))]
        print(f"{key:{width}s} " + "  ".join(cols))
