"""`strata serve`'s stop signals where the event loop has no signal handlers, as on Windows: its loops raise
NotImplementedError from add_signal_handler, simulated here by a shim that makes Linux's loop do the same and
names a signal SIGBREAK (Windows' Ctrl-Break and closed console window; SIGUSR1 stands in, whose default action
also ends the process). Each stops the server cleanly, parking its conversation, as SIGTERM does on Linux; before,
SIGBREAK ended it at once with nothing parked. Not here: the POSIX signals (test_terminal_closed.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.server.test_terminal_closed import stops_cleanly_and_parks

SHIM = """
import signal, sys
from asyncio import unix_events
def no_handlers(self, sig, callback, *args):
    raise NotImplementedError     # what Windows' ProactorEventLoop and SelectorEventLoop do
unix_events._UnixSelectorEventLoop.add_signal_handler = no_handlers
signal.SIGBREAK = signal.SIGUSR1
from strata.cli import main
sys.exit(main(sys.argv[1:]))
"""


def start_windows_like_server(tiny_model, tmp_path) -> subprocess.Popen:
    return start_shimmed_server(SHIM, tiny_model, tmp_path)


def start_shimmed_server(shim: str, tiny_model, tmp_path, **env_extra) -> subprocess.Popen:
    """`strata serve` run through `shim` (Python that stands in for what Windows does), on the tiny model, one
    slot, a cold disk level under tmp_path; its output in tmp_path/server.log."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **env_extra}
    env.pop("STRATA_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, "-c", shim, "serve", "--no-config", "--port", "0", "--threads", "1",
         "--model", str(tiny_model), "--ctx", "1024", "--batch", "1", "--conversation-cache-mib", "0",
         "--conversation-cache-cold-dir", str(tmp_path / "cold"), "--conversation-cache-cold-mib", "64"],
        stdout=open(tmp_path / "server.log", "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        cwd=tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGINT], ids=["SIGBREAK", "SIGINT"])
def test_a_stop_signal_without_loop_handlers_stops_the_server_cleanly_and_parks(tiny_model, tmp_path, sig):
    proc = start_windows_like_server(tiny_model, tmp_path)
    stops_cleanly_and_parks(proc, tmp_path, lambda: proc.send_signal(sig))
