"""Ctrl-C while `strata serve` starts: before its handlers exist (aiohttp and the engine still importing)
it ends quietly with status 130, not with a KeyboardInterrupt traceback through the imports; while the
model loads it says it stops once the load is done (and does, with no INFO line that reads as if it
served), and a second Ctrl-C quits at once (status 130: nothing has been served, nothing is lost)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def serve(model, tmp_path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("STRATA_API_KEY", None)
    return subprocess.Popen([sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0",
                             "--threads", "1", "--model", str(model), "--ctx", "1024", "--batch", "1",
                             "--conversation-cache-mib", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)


def finish(proc: subprocess.Popen) -> str:
    try:
        return proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("delay_s", [0.3, 0.6, 0.9])
def test_ctrl_c_while_starting_never_prints_a_traceback(default_model_path, tmp_path, delay_s):
    proc = serve(default_model_path, tmp_path)
    time.sleep(delay_s)                  # on a busy machine: still importing (it printed 30 lines of frames)
    proc.send_signal(signal.SIGINT)
    out = finish(proc)
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    # -SIGINT: the signal came while the interpreter itself started (no handler yet; nothing printed)
    assert proc.returncode in (0, 130, -signal.SIGINT), out


def read_until_listening(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline()
    assert "(loading the model)" in line, line
    return line


def test_ctrl_c_while_the_model_loads_says_it_stops_after_the_load(default_model_path, tmp_path):
    proc = serve(default_model_path, tmp_path)          # seconds of loading (packing its weights)
    read_until_listening(proc)
    proc.send_signal(signal.SIGINT)
    out = finish(proc)
    assert proc.returncode == 0, out
    assert "stopping once the model has loaded" in out and "a second Ctrl-C or stop signal quits now" in out
    assert "not serving it: the server is stopping" in out
    assert "listening on" not in out, out   # the INFO line after "stopping" read as if it now served


def test_a_second_ctrl_c_while_the_model_loads_quits_at_once(default_model_path, tmp_path):
    proc = serve(default_model_path, tmp_path)
    read_until_listening(proc)
    proc.send_signal(signal.SIGINT)
    said = ""
    while "stopping once the model has loaded" not in said and proc.poll() is None:
        said = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    out = finish(proc)
    assert proc.returncode == 130, out
    assert "stopped while loading the model" in out and "Traceback" not in out


INTERRUPT_WHILE_THE_LOOP_IS_BUILT = """
import asyncio.selector_events, sys
from strata.cli import main

def interrupted(self):          # where a Ctrl-C landed in CI: inside asyncio.run, its loop half-built
    raise KeyboardInterrupt

asyncio.selector_events.BaseSelectorEventLoop._make_self_pipe = interrupted
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_while_asyncio_builds_its_loop_leaves_no_report_of_half_built_objects(default_model_path, tmp_path):
    # The signal's timing decides where it lands; this places it at the one spot that printed 'Exception
    # ignored in BaseEventLoop.__del__' and "coroutine 'serve' was never awaited" with their frames.
    proc = subprocess.run([sys.executable, "-c", INTERRUPT_WHILE_THE_LOOP_IS_BUILT, "serve", "--no-config",
                           "--port", "0", "--model", str(default_model_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "Exception ignored" not in out and "never awaited" not in out, out
