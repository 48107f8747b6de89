"""`scripts/ensure-venv` (what `./run` and `./test` run first) says how long a step may take and, on a terminal,
counts its seconds: a new-user trial from a fresh clone sat before "strata: building the engine" for 67 s with
nothing on the screen (pip -q prints nothing), the dependencies before it for 14 s more.

The real script runs in a copy of the repository's layout whose `.venv/bin/python` is a stand-in that takes
`PIP_SECONDS` and exits with `PIP_STATUS` (a real pip would reinstall this environment: not what is tested);
its dependency stamp is current, so only the engine's build step runs."""

from __future__ import annotations

import hashlib
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell script")


@pytest.fixture
def checkout(tmp_path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "ensure-venv", tmp_path / "scripts" / "ensure-venv")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\nsleep "${PIP_SECONDS:-0}"\nexit "${PIP_STATUS:-0}"\n')
    python.chmod(0o755)
    stamp = hashlib.sha1((tmp_path / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (tmp_path / ".venv" / ".strata-deps").write_text(stamp + "\n")
    return tmp_path


def on_a_terminal(checkout: Path, **env: str) -> tuple[int, str]:
    """The script's exit status and all it wrote, its stderr a pseudo-terminal."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(checkout / "scripts" / "ensure-venv")], stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, env={**os.environ, **env}, close_fds=True)
    os.close(slave)
    seen = b""
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:     # the script and its children closed the terminal
            break
        if not data:
            break
        seen += data
    os.close(master)
    return proc.wait(timeout=60), seen.decode(errors="replace")


def test_a_first_build_says_how_long_and_counts_its_seconds(checkout):
    status, said = on_a_terminal(checkout, PIP_SECONDS="6")
    assert status == 0, said
    assert "strata: building the engine (the first build: a minute or more on two cores" in said, said
    assert "\r  5 s\r" in said, said


def test_a_rebuild_says_it_builds_only_what_changed(checkout):
    (checkout / "build").mkdir()
    status, said = on_a_terminal(checkout)
    assert status == 0 and "strata: building the engine (only what changed)" in said, said


def test_a_failed_build_keeps_its_exit_status_and_writes_no_stamp(checkout):
    (checkout / ".venv" / ".strata-deps").write_text("old\n")
    (checkout / ".venv" / "bin" / "python").write_text(
        '#!/bin/sh\ncase "$*" in *" -e "*) sleep 6; exit 3;; esac\nexit 0\n')
    status, said = on_a_terminal(checkout)
    assert status == 3, said
    assert "strata: installing dependencies into .venv (pip prints nothing meanwhile)" in said, said
    assert (checkout / ".venv" / ".strata-deps").read_text() == "old\n"


def test_without_a_terminal_no_count_is_written(checkout):
    done = subprocess.run([str(checkout / "scripts" / "ensure-venv")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PIP_SECONDS": "6"})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ("strata: building the engine (the first build: a minute or more on two cores; pip prints "
                           "nothing meanwhile)\n"), done.stderr
