"""Token-count flags (`--ctx`, `--slot-ctx`) given a new user's values, run as the user runs them (a subprocess),
from a session-39 trial: `strata serve --ctx -5k` said "argument --ctx: expected one argument" (argparse reads
-5k as a flag) and not what the flag takes; `strata chat --ctx 32k` was "invalid int value" where `strata serve
--ctx 32k` reads 32768. Both commands now read a token count with one parser (strata.token_counts)."""

from __future__ import annotations

import subprocess
import sys

import pytest

TAKES = "a token count is a positive whole number (8192, or 32k = 32768, 1m)"


def strata(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", *argv], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("argv, flag", [
    (["serve", "--ctx", "-5k"], "--ctx"),
    (["serve", "--slot-ctx", "-5k"], "--slot-ctx"),
    (["chat", "--ctx", "-5k"], "--ctx"),
    (["serve", "--ctx"], "--ctx"),
])
def test_a_token_count_read_as_a_flag_says_what_the_flag_takes(argv, flag):
    done = strata(*argv)
    assert done.returncode == 2, done.stderr
    assert f"  {flag}: {TAKES}" in done.stderr.splitlines(), done.stderr


def test_chat_reads_32k_as_serve_does():
    """99999k is 102398976 tokens, past the bound serve and chat share: the refusal shows the count it read
    (no model is loaded)."""
    done = strata("chat", "--ctx", "99999k")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == ["strata chat: --ctx must be 1 to 16777216, got 102398976"], done.stderr
    done = strata("chat", "--ctx", "32x")
    assert done.returncode == 2, done.stderr
    assert "argument --ctx: expected a number of tokens (8192, 32k, 1m), got '32x'" in done.stderr, done.stderr
