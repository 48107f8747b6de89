"""`strata serve --help` names the environment variable of each option that has one (STRATA_API_KEY for
--api-key), as docs/configuration.md does: a user reading only --help did not learn that the key can come
from the environment (found trying Strata as a new user, session 38)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_help_names_each_options_variable():
    from strata.server.config import all_options

    with_env = [o for o in all_options() if o.env]
    assert [o.name for o in with_env] == ["api-key"]     # the one there is today; a new one is checked alike
    env = {**os.environ, "COLUMNS": "1000"}               # one line an option: the flag and its text together
    out = subprocess.run([sys.executable, "-m", "strata", "serve", "--help"], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    for opt in with_env:
        line = next(line for line in out.splitlines() if line.strip().startswith(f"--{opt.name} "))
        assert f"${opt.env}" in line, line
