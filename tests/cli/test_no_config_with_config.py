"""`strata serve --no-config --config FILE` read FILE and said nothing of --no-config, where docs/configuration.md
said --no-config ignores the configuration file (a session-39 trial). Both together are refused now, exit status
2, before the model loads; --no-config alone still skips $STRATA_CONFIG. Run as the user runs it (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys


def serve(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", "serve", *argv], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, env=env)


def test_both_are_refused_naming_them(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("ctxx = 2048\n", encoding="utf-8")     # read (as before), start-up stops at its key at once
    done = serve("--no-config", "--config", str(config), "--port", "0")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"strata serve: --no-config with --config {config}: ") and "give one of them" \
        in done.stderr
    assert "loading the model" not in done.stderr


def test_no_config_alone_still_skips_the_variables_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("ctxx = 1\n", encoding="utf-8")               # read, it would stop start-up (unknown key)
    env = {**os.environ, "STRATA_CONFIG": str(bad)}
    assert serve("--port", "0", "--ctx", "16", env=env).returncode == 2
    done = serve("--no-config", "--port", "99999", env=env)       # skipped: the next check is the port's
    assert done.returncode == 2 and "--port: 99999 is above the maximum 65535" in done.stderr, done.stderr
