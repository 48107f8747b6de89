"""Run by test_exit_past_a_stuck_step.py in a child process (an abort at exit must end this child, not pytest):
the real `strata serve` entry (server/cli.py `run`) on a tiny model, a request's prompt piece held inside the
engine's prefill, SIGINT; the stop gives the held piece up at once (its allowances scaled down), the cache
closes, `run` returns. Only then does the held call go on, into a real GIL-released engine call (~0.4 s) that
ends while the interpreter finalizes: the finalization of a server's many objects, made long here (about a
second) by a module-level list of small lists.

Usage: python stuck_step_exit_child.py <model.gguf> <sessions folder>; exits with the server's status.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx2 as httpx  # noqa: E402
from strata.engine import Engine  # noqa: E402
from strata.server import cli, stop_progress  # noqa: E402

stop_progress.STEP_WAIT_SLACK_S = 0.05     # the held piece is given up as stuck at once
stop_progress.STEP_WAIT_UNKNOWN_S = 0.05
OBJECTS = [[i] for i in range(6_000_000)]  # freed as the interpreter finalizes: about a second

real_prefill = Engine.prefill
go_on = threading.Event()
held = threading.Event()


def prefill(self, ctx, tokens, *args, **kwargs):
    if len(tokens) >= 200 and not held.is_set():
        held.set()
        go_on.wait(60)
        # a long real engine call (~0.4 s), the GIL released inside it: it ends while the interpreter finalizes
        real_prefill(self, 1, [(i * 37) % 500 + 3 for i in range(7000)], *args, **kwargs)
    return real_prefill(self, ctx, tokens, *args, **kwargs)


Engine.prefill = prefill


def ask_then_stop(port: int) -> None:
    def ask() -> None:
        try:
            httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60,
                       json={"prompt": [(i * 11) % 500 + 3 for i in range(300)], "max_tokens": 2})
        except httpx.HTTPError:
            pass          # the stop ends it
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    threading.Thread(target=ask, daemon=True).start()
    if held.wait(60):
        os.kill(os.getpid(), signal.SIGINT)


def main() -> int:
    model, sessions = sys.argv[1], sys.argv[2]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--no-config", "--model", model, "--port", str(port), "--ctx", "8192", "--batch", "1",
                              "--slot-ctx", "8192", "--threads", "1", "--conversation-cache-sessions-dir", sessions])
    threading.Thread(target=ask_then_stop, args=(port,), daemon=True).start()
    status = cli.run(args)
    go_on.set()          # the step given up goes on now, and the interpreter exits while it runs
    time.sleep(0.05)
    return status


if __name__ == "__main__":
    sys.exit(main())
