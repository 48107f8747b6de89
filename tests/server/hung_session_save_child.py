"""Run by test_stop_past_a_hung_session_save.py in a child process (its hung write must end with this child, not
with pytest): the real `strata serve` entry (server/cli.py `run`) on a tiny model, no slots, a cold level. Two
conversations (the first parked to RAM by the second), session 'work' saved after the first; then saved again
after the second, and that save's second image write hangs for ever (STRATA_TEST_SESSION_WRITE_HANG_AFTER, armed
here once the first save's writes are counted); SIGINT. The stop's allowances are scaled down (the save call is
given up after 0.5 s, a save that writes nothing for 1 s is abandoned); the process must end by itself.

Usage: python hung_session_save_child.py <model.gguf> <sessions folder> <cold folder>; exits with the server's
status; prints `first save: <its answer>` on stdout.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx2 as httpx  # noqa: E402
from strata.server import cli, stop_progress  # noqa: E402
from strata.server.cache import cache as cache_module  # noqa: E402
from strata.server.cache import fileio  # noqa: E402

stop_progress.CALL_WAIT_S = 0.5       # the stop gives the save's call up at once
cache_module.SAVE_STALL_S = 1.0       # and the cache's close the save, once it has written nothing for 1 s
PROMPTS = ([(i * 7) % 400 + 50 for i in range(1500)], [(i * 11) % 400 + 60 for i in range(1400)])
made: list = []
real_file_io_from_env = fileio.file_io_from_env


def file_io_from_env(*args, **kwargs):
    io = real_file_io_from_env(*args, **kwargs)
    made.append(io)
    return io


fileio.file_io_from_env = file_io_from_env


def drive_then_stop(port: int, sessions: str) -> None:
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    httpx.post(url + "/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 1}, timeout=60).raise_for_status()
    first = httpx.post(url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=60)
    print("first save:", json.dumps(first.json()), flush=True)
    io = made[-1]
    io.hang_after = io.made + 1       # the next save's second image write hangs
    httpx.post(url + "/v1/completions", json={"prompt": PROMPTS[1], "max_tokens": 1}, timeout=60).raise_for_status()

    def save_again() -> None:
        try:
            httpx.post(url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=60)
        except httpx.HTTPError:
            pass          # the stop ends it
    threading.Thread(target=save_again, daemon=True).start()
    if io.hung.wait(60) and glob.glob(os.path.join(sessions, "*.img.*.tmp")):
        os.kill(os.getpid(), signal.SIGINT)


def main() -> int:
    model, sessions, cold = sys.argv[1:4]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--no-config", "--model", model, "--port", str(port), "--ctx", "2048", "--batch", "0",
                              "--threads", "1", "--conversation-cache-sessions-dir", sessions,
                              "--conversation-cache-cold-dir", cold, "--conversation-cache-cold-mib", "256"])
    threading.Thread(target=drive_then_stop, args=(port, sessions), daemon=True).start()
    return cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
