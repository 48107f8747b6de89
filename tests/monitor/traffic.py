"""Real traffic for the monitor and app tests: start `strata serve` as a process, wait for /health,
and run agent-like clients (each its own conversation, several turns) over HTTP with urllib.

Not a fake server and not a benchmark: it only makes the server do what the monitor must show
(slots busy, conversations displaced and parked to disk, cache hits, a prompt whose top changes).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

STRATA = [sys.executable, "-m", "strata"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_flags(model: Path, port: int, cache_root: Path, *, batch: int = 2) -> list[str]:
    """Flags of a small server whose displaced conversations park to disk (cold level + system-prompt cache)."""
    return ["--no-config", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--batch", str(batch), "--ctx", "4096", "--threads", "1",
            "--conversation-cache-park", "disk",
            "--conversation-cache-cold-dir", str(cache_root / "cold"), "--conversation-cache-cold-mib", "64",
            "--conversation-cache-system-prompt-dir", str(cache_root / "system-prompts"),
            "--conversation-cache-system-prompt-mib", "16"]


def start_serve(flags: list[str], log_path: Path) -> subprocess.Popen:
    log = open(log_path, "ab")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([*STRATA, "serve", *flags], stdout=log, stderr=subprocess.STDOUT, env=env)


def wait_health(url: str, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"strata serve exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError) as e:
            last = str(e)
        time.sleep(0.1)
    raise TimeoutError(f"{url}/health not ok after {timeout:.0f} s: {last}")


def get_json(url: str, api_key: str | None = None) -> dict:
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def chat(url: str, messages: list[dict], max_tokens: int = 8, api_key: str | None = None) -> dict:
    body = json.dumps({"model": "any", "messages": messages, "max_tokens": max_tokens,
                       "temperature": 0.0}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"HTTP {e.code}: {e.read()[:300]!r}") from None


SYSTEM = "You are a careful coding agent. Read the files, then answer with a patch. " * 4


def agent(url: str, name: str, turns: int, *, changing_top: bool = False, api_key: str | None = None,
          max_tokens: int = 8) -> None:
    """One client: a growing conversation of `turns` requests. `changing_top` puts a timestamp at the top
    of the system prompt every turn (the client mistake the monitor's mismatch column shows)."""
    messages = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"[{name}] please look at src/{name}.py " + "def f(x): return x\n" * 20}]
    for turn in range(turns):
        if changing_top:
            messages[0] = {"role": "system", "content": f"time {turn:04d}. " + SYSTEM}
        reply = chat(url, messages, max_tokens=max_tokens, api_key=api_key)
        text = reply["choices"][0]["message"].get("content") or ""
        messages.append({"role": "assistant", "content": text})
        messages.append({"role": "user", "content": f"turn {turn}: now look at tests/test_{name}.py " * 8})


def run_agents(url: str, n: int = 4, turns: int = 3, api_key: str | None = None,
               max_tokens: int = 8) -> list[BaseException]:
    """`n` agents at once (the last one changes the top of its prompt); returns the errors raised."""
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            agent(url, f"agent{i}", turns, changing_top=(i == n - 1), api_key=api_key, max_tokens=max_tokens)
        except BaseException as e:  # noqa: B036 - reported to the test
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return errors
