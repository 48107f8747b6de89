"""`./run` in a terminal window that the user closes: the kernel hangs up the terminal (SIGHUP) and the
server stops as on Ctrl-C, parking the conversation it holds to the cold level. Under `nohup` (SIGHUP
ignored) it keeps serving. Before, SIGHUP's default action killed it: nothing parked, no "stopping"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable

import openai
import pytest

from tests.server.test_auth_and_lifecycle import listening_port, wait_healthy

# POSIX only: the module is skipped, not an import error, where these do not exist (Windows)
fcntl = pytest.importorskip("fcntl", reason="POSIX terminals and signals")
termios = pytest.importorskip("termios", reason="POSIX terminals and signals")


def start_server(tiny_model, tmp_path, **popen) -> subprocess.Popen:
    """`strata serve` on port 0 (listening_port reads which), its output in server.log."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("STRATA_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", "--threads", "1",
         "--model", str(tiny_model), "--ctx", "1024", "--batch", "1", "--conversation-cache-mib", "0",
         "--conversation-cache-cold-dir", str(tmp_path / "cold"), "--conversation-cache-cold-mib", "64"],
        stdout=open(tmp_path / "server.log", "w"), stderr=subprocess.STDOUT, env=env, cwd=tmp_path, **popen)


def one_conversation(port: int) -> None:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60)
    client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hello " * 40}],
                                   max_tokens=4, temperature=0)


def parked(tmp_path) -> list[str]:
    cold = tmp_path / "cold"
    return sorted(p.name for p in cold.glob("*.img")) if cold.is_dir() else []


def stops_cleanly_and_parks(proc: subprocess.Popen, tmp_path, stop: Callable[[], None]) -> None:
    """Serves one conversation (nothing parked yet), calls `stop`, then asserts the server ended with status 0,
    said "stopping", logged no traceback and parked that conversation to the cold level."""
    try:
        port = listening_port(tmp_path / "server.log", proc)
        wait_healthy(port, proc)
        one_conversation(port)
        assert parked(tmp_path) == []
        stop()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "server.log").read_text()
    assert proc.returncode == 0, log
    assert "stopping" in log and "Traceback" not in log, log
    assert len(parked(tmp_path)) == 1, log


def test_closing_the_terminal_stops_the_server_cleanly_and_parks_its_conversation(tiny_model, tmp_path):
    master, slave = os.openpty()

    def own_terminal() -> None:          # a new session whose controlling terminal is the pty, as a shell's
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = start_server(tiny_model, tmp_path, stdin=slave, start_new_session=True,
                        preexec_fn=own_terminal)
    os.close(slave)
    stops_cleanly_and_parks(proc, tmp_path, lambda: os.close(master))   # the window closed: the kernel sends SIGHUP


def test_under_nohup_a_hangup_leaves_the_server_running(tiny_model, tmp_path):
    proc = start_server(tiny_model, tmp_path, stdin=subprocess.DEVNULL,
                        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))   # what nohup does
    try:
        port = listening_port(tmp_path / "server.log", proc)
        wait_healthy(port, proc)
        proc.send_signal(signal.SIGHUP)
        one_conversation(port)           # still answers after the hangup
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
