"""`./run` picks the app or the headless server by the app's own rule (strata.cli.headless): the app with
DISPLAY, WAYLAND_DISPLAY or QT_QPA_PLATFORM (offscreen included) set, the server in the terminal without
them or with STRATA_HEADLESS. It looked at DISPLAY and WAYLAND_DISPLAY only: `QT_QPA_PLATFORM=offscreen
./run` ran the server though strata-app runs there, and on macOS (no DISPLAY) it never opened the app.

The real script runs from a copy of the repository's `run` beside this environment's `.venv` (its
`scripts/ensure-venv`, which would reinstall the package, is left out: that is not what is tested);
`--help` shows which program it started."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)

pytestmark = pytest.mark.skipif(sys.platform == "win32" or not (VENV / "bin" / "strata-app").exists(),
                                reason="a POSIX .venv with strata-app installed")


@pytest.fixture(scope="module")
def run_copy(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("checkout")
    shutil.copy(ROOT / "run", folder / "run")
    (folder / "scripts").mkdir()
    (folder / "scripts" / "ensure-venv").write_text("#!/usr/bin/env bash\n")
    (folder / "scripts" / "ensure-venv").chmod(0o755)
    (folder / ".venv").symlink_to(VENV)
    return folder / "run"


def started(run: Path, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "STRATA_HEADLESS")}
    done = subprocess.run([str(run), "--help"], env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    usage = done.stdout.split("\n", 1)[0]
    assert usage.startswith(("usage: strata-app", "usage: strata serve")), done.stdout[:300]
    return "app" if usage.startswith("usage: strata-app") else "server"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's display variables")
@pytest.mark.parametrize("env,program", [
    ({}, "server"),
    ({"QT_QPA_PLATFORM": "offscreen"}, "app"),
    ({"DISPLAY": ":0"}, "app"),
    ({"WAYLAND_DISPLAY": "wayland-0"}, "app"),
    ({"DISPLAY": ":0", "STRATA_HEADLESS": "1"}, "server"),
    ({"QT_QPA_PLATFORM": "offscreen", "STRATA_HEADLESS": "1"}, "server"),
])
def test_run_starts_the_app_where_the_app_can_run(run_copy, env, program):
    assert started(run_copy, **env) == program
