"""`strata setup --show` refuses the flags only a setup reads (a new-user trial): `strata setup --show --model M
--fresh --yes` printed the file there, `valid`, status 0, as if none of them had been given, so a user who
meant to see what a setup with M would write saw the old file's model. --config is --show's own. The real CLI in
a process of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest


def strata(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", *args], env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


@pytest.fixture
def written(tmp_path, env, default_model_path):
    path = tmp_path / "config.toml"
    done = strata("setup", "--yes", "--skip-bench", "--config", str(path), "--model", str(default_model_path),
                  "--cold-dir", str(tmp_path / "cold"), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return path


@pytest.mark.parametrize("flags,named", [
    (["--model", "other.gguf"], "--model"),
    (["--fresh", "--yes"], "--yes, --fresh"),
    (["--cold-dir", "/tmp/x", "--skip-bench", "--disk-bench-mib", "64"], "--cold-dir, --skip-bench, --disk-bench-mib"),
])
def test_setup_flags_beside_show_are_refused_by_name(written, env, flags, named):
    before = written.read_bytes()
    done = strata("setup", "--show", "--config", str(written), *flags, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"strata setup: {named}: not read with --show"), done.stderr
    assert done.stdout == "" and written.read_bytes() == before


def test_show_with_its_own_config_flag_still_prints_the_file(written, env):
    done = strata("setup", "--show", "--config", str(written), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "valid: `strata serve` accepts this file" in done.stdout
