"""`strata monitor` refusing an address names where it came from, `--url` or `STRATA_URL`, in the form of the
command's other refusals (a session-39 trial: `STRATA_URL=ftp://x strata monitor` answered `monitor: 'ftp://x' is
not an http(s) address`, naming neither the variable nor the command). Run as the user runs it (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def monitor(tmp_path, *argv: str, url_variable: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "STRATA_URL"}
    if url_variable is not None:
        env["STRATA_URL"] = url_variable
    return subprocess.run([sys.executable, "-m", "strata", "monitor", "--screenshot", str(tmp_path / "m.png"),
                           *argv], env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("variable, argv, said", [
    ("ftp://x", [], "strata monitor: STRATA_URL: 'ftp://x' is not an http(s) address (example: http://127.0.0.1:8080)"),
    ("", [], "strata monitor: STRATA_URL: empty (example: http://127.0.0.1:8080)"),
    (None, ["--url", "ftp://y"], "strata monitor: --url: 'ftp://y' is not an http(s) address"),
    (None, ["--url", "localhost:99999"], "strata monitor: --url: 'localhost:99999' has an invalid port"),
    ("http://127.0.0.1:1", ["--url", ""], "strata monitor: --url: empty"),
])
def test_a_bad_address_names_where_it_came_from(tmp_path, variable, argv, said):
    done = monitor(tmp_path, *argv, url_variable=variable)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(said) and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "m.png").exists()
