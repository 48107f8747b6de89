"""What the stop-plan tests share (test_stop_plans_*.py): a real `strata serve` that completes a few token prompts,
then stops cleanly, and the readings of what its stop kept (the histories left on disk, its "keeping N" lines)."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import httpx2 as httpx

from tests.server.live import complete
from tests.server.test_auth_and_lifecycle import listening_port, start_cli, stop_server, wait_healthy

KEEPING = re.compile(r"stopping: keeping (\d+) conversations? for the next start \(([\d.]+) of ([\d.]+) MiB written"
                     r"(?:; (\d+) of them evicted by the disk budget)?")


def prompt(seed: int, n: int) -> list[int]:
    return [10 + (seed * 131 + i * 7) % 500 for i in range(n)]


def seed_of(tokens: list[int], n: int, seeds: int) -> int:
    """Which of the test's `seeds` conversations a kept history is (its prompt's first `n` tokens lead it)."""
    found = [s for s in range(seeds) if tokens[:n] == prompt(s, n)]
    assert len(found) == 1, tokens[:8]
    return found[0]


def kept_seeds(folder: Path, n: int, seeds: int) -> set[int]:
    """The conversations whose histories a disk level's folder holds (by their sidecars)."""
    return {seed_of(json.loads(p.read_text())["tokens"], n, seeds) for p in folder.glob("strata-conv-*.json")}


def keeping_lines(text: str) -> list[re.Match]:
    """The server's "keeping N conversations for the next start" lines, in order."""
    return [m for line in text.splitlines() if (m := KEEPING.search(line))]


def parked_in_ram(model: Path, ram_mib: int, **levels: tuple[Path, int]) -> list[str]:
    """`strata serve` flags for `model` (4,096 tokens, two 2,048-token slots) parking to a RAM level of `ram_mib`, with
    each disk level named (warm=, cold=) at its (folder, MiB), in the order given."""
    args = ["--model", str(model), "--ctx", "4096", "--batch", "2", "--slot-ctx", "2048",
            "--conversation-cache-mib", str(ram_mib), "--conversation-cache-park", "ram"]
    for level, (folder, mib) in levels.items():
        args += [f"--conversation-cache-{level}-dir", str(folder), f"--conversation-cache-{level}-mib", str(mib)]
    return args


def complete_then_stop(args: list[str], tmp_path: Path, prompts: list[list[int]]) -> tuple[dict, str]:
    """`strata serve args` completes each of `prompts` in turn (one greedy token), then SIGTERM: it must exit 0 with
    no traceback. Returns the monitor feed's stop outlook (read just before the stop) and the server's output."""
    proc, log = start_cli(args, tmp_path)
    try:
        port = listening_port(log, proc)
        wait_healthy(port, proc)
        for p in prompts:
            complete(f"http://127.0.0.1:{port}", p, timeout=300)
        outlook = httpx.get(f"http://127.0.0.1:{port}/v1/monitor", timeout=30).json()["stop"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        stop_server(proc)
    text = log.read_text()
    assert "Traceback" not in text, text
    return outlook, text
