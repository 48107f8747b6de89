"""The packaged app's children (`strata-app --strata-cli ...`: its server, the setup bench) never let an error reach
PyInstaller's bootloader, which on the windowed executable opens a modal traceback dialog nobody sees while the app
waits on the child for ever: the traceback goes to their standard error (the app's pipe) and they exit with
status 1. The real entry script (resources/packaging/strata_app_entry.py) runs here with sys.frozen set; the
interpreter's top level, where the bootloader takes an uncaught error, is marked by an excepthook that says so.
The error is a real one: the import of aiohttp refused, as a bundle whose spec missed a hidden import refuses it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ENTRY = Path(__file__).resolve().parents[2] / "resources" / "packaging" / "strata_app_entry.py"
TOP_LEVEL = "reached the bootloader: the modal traceback dialog"

RUN = """
import os, runpy, sys
lacking, entry, *args = sys.argv[1:]
if lacking:
    sys.modules[lacking] = None      # its import: ModuleNotFoundError, as in a bundle without it
sys.frozen = True

def bootloader(*exc_info):           # where PyInstaller's bootloader opens its dialog on a windowed executable
    sys.stderr.write(TOP_LEVEL + "\\n")
    sys.stderr.flush()
    os._exit(99)

sys.excepthook = bootloader
sys.argv = [entry, *args]
runpy.run_path(entry, run_name="__main__")
""".replace("TOP_LEVEL", repr(TOP_LEVEL))


def run_entry(*args: str, lacking: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ}
    env.pop("STRATA_API_KEY", None)
    return subprocess.run([sys.executable, "-c", RUN, lacking, str(ENTRY), *args], capture_output=True, text=True,
                          env=env, timeout=120, stdin=subprocess.DEVNULL)


def test_a_child_s_uncaught_error_goes_to_its_stderr_with_status_1_not_to_the_dialog(tmp_path):
    done = run_entry("--strata-cli", "serve", "--no-config", "--model", str(tmp_path / "m.gguf"), lacking="aiohttp")
    assert TOP_LEVEL not in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last)" in done.stderr, done.stderr
    assert "ModuleNotFoundError" in done.stderr and "aiohttp" in done.stderr, done.stderr


def test_a_child_s_own_statuses_go_through():
    done = run_entry("--strata-cli", "serve", "--no-such-flag")        # argparse's SystemExit(2)
    assert done.returncode == 2 and TOP_LEVEL not in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = run_entry("--strata-cli", "--version")
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
