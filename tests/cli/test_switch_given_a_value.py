"""An on/off flag given a value (`strata serve --memory-check=no`, `strata models --json=yes`), run as the user
runs it (a subprocess): argparse said "ignored explicit argument 'no'" and nothing of what to type (a session-39
trial). Each command's switches now say how they are given: the flag alone, or its --no- twin."""

from __future__ import annotations

import subprocess
import sys

import pytest


def strata(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", *argv], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("argv, said", [
    (["serve", "--memory-check=no"],
     "--memory-check takes no value: give --memory-check to turn it on, --no-memory-check to turn it off"),
    (["serve", "--no-memory-check=yes"],
     "--no-memory-check takes no value: give --memory-check to turn it on, --no-memory-check to turn it off"),
    (["serve", "--no-config=1"], "--no-config takes no value: give --no-config alone, or leave it out"),
    (["models", "--json=yes"], "--json takes no value: give --json alone, or leave it out"),
    (["bench", "--quick=no"], "--quick takes no value: give --quick alone, or leave it out"),
    (["setup", "--yes=no"], "--yes takes no value: give --yes alone, or leave it out"),
    (["replay", "--json=false"], "--json takes no value: give --json alone, or leave it out"),
])
def test_a_switch_given_a_value_says_how_to_give_it(argv, said):
    done = strata(*argv)
    assert done.returncode == 2, done.stderr
    assert f"  {said}" in done.stderr.splitlines(), done.stderr
