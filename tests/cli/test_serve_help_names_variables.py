"""`strata serve --help` names the environment variable of each option that has one (STRATA_API_KEY for
--api-key), as docs/configuration.md does: a user reading only --help did not learn that the key can come
from the environment, nor --config that $STRATA_CONFIG names the file (found trying Strata as a new user,
session 38)."""

from __future__ import annotations

import os
import subprocess
import sys


def serve_help() -> str:
    env = {**os.environ, "COLUMNS": "1000"}               # one line an option: the flag and its text together
    return subprocess.run([sys.executable, "-m", "strata", "serve", "--help"], capture_output=True, text=True,
                          env=env, timeout=120, check=True).stdout


def help_line(out: str, flag: str) -> str:
    return next(line for line in out.splitlines() if line.strip().startswith(f"{flag} "))


def test_help_names_each_options_variable():
    from strata.server.config import all_options

    with_env = [o for o in all_options() if o.env]
    assert [o.name for o in with_env] == ["api-key"]     # the one there is today; a new one is checked alike
    out = serve_help()
    for opt in with_env:
        line = help_line(out, f"--{opt.name}")
        assert f"${opt.env}" in line, line


def test_help_of_config_names_strata_config():
    """docs/configuration.md: `--config PATH`, else `$STRATA_CONFIG`, else the platform file."""
    assert "$STRATA_CONFIG" in help_line(serve_help(), "--config")
