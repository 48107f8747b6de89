"""`strata setup --show` answers a configuration file with `strata serve`'s exit status, as docs/install.md says:
a file that is not TOML, not UTF-8 text, or a folder is refused by serve with status 2, and --show said 1 (a
session-39 trial, `ctx = 4096` then `batch = ` with no value). No file there is still 1: nothing to check."""

from __future__ import annotations

import subprocess
import sys

import pytest


def strata(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "strata", *argv], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("content, said", [
    (b"ctx = 4096\nbatch = \n", "not valid TOML: Invalid value (at line 2, column 9)"),
    (b"ctx = \xff\xfe\n", "not UTF-8 text"),
])
def test_a_file_serve_refuses_as_not_toml_is_status_2_as_serve_gives(tmp_path, content, said):
    config = tmp_path / "config.toml"
    config.write_bytes(content)
    served = strata("serve", "--config", str(config))
    shown = strata("setup", "--show", "--config", str(config))
    assert served.returncode == 2 and shown.returncode == 2, (served.stderr, shown.stderr)
    assert said in shown.stderr and "Traceback" not in shown.stderr


def test_a_folder_given_as_the_file_is_status_2(tmp_path):
    shown = strata("setup", "--show", "--config", str(tmp_path))
    assert shown.returncode == 2 and f"strata setup: {tmp_path}: cannot read it" in shown.stderr, shown.stderr


def test_no_file_there_is_still_status_1(tmp_path):
    shown = strata("setup", "--show", "--config", str(tmp_path / "none.toml"))
    assert shown.returncode == 1 and "no configuration file there (run `strata setup`)" in shown.stderr
