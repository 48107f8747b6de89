"""A clean stop plans the spill queue's histories and RAM's hand-downs as one (session 42, item B): the queue's were
written first, then RAM's were picked as if the level below were empty, and their writes evicted the queue's:
a wasted write, and the most recently used history lost.

A real `strata serve` in a subprocess (an 8-layer tiny model, 1 KiB of KV a token; RAM 1 MiB, parks to RAM, cold
2 MiB alone below it): three short conversations (300 tokens, 0.29 MiB each) then a long one (1,200 tokens,
1.17 MiB: larger than RAM's budget, so its park at the stop goes to the spill queue), then SIGTERM. Cold keeps the
long one (used last) and the two newest short ones; before, the queue wrote the long one, RAM's hand-down wrote all
three short ones beside it and evicted it ("1 of the 4 conversations written made room")."""

from __future__ import annotations

import json
import signal

import httpx2 as httpx
import pytest

from tests.server.test_auth_and_lifecycle import listening_port, start_cli, stop_server, wait_healthy
from tests.server.test_stop_plans_what_cold_keeps import KEEPING

SHORT, LONG = 300, 1200


@pytest.fixture(scope="module")
def deep_model(tiny_model_factory):
    """The tiny model with 8 layers: 1 KiB of KV a token, so a 1,200-token history is past a 1 MiB RAM budget."""
    return tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, n_layer=8)


def prompt(seed: int, n: int) -> list[int]:
    return [10 + (seed * 131 + i * 7) % 500 for i in range(n)]


def seed_of(tokens: list[int]) -> int:
    seeds = [s for s in range(4) if tokens[:SHORT] == prompt(s, SHORT)]
    assert len(seeds) == 1, tokens[:8]
    return seeds[0]


def test_the_queue_and_rams_hand_downs_are_one_plan(deep_model, tmp_path):
    cold = tmp_path / "cold"
    proc, log = start_cli(["--model", str(deep_model), "--ctx", "4096", "--batch", "2", "--slot-ctx", "2048",
                           "--conversation-cache-mib", "1", "--conversation-cache-park", "ram",
                           "--conversation-cache-cold-dir", str(cold), "--conversation-cache-cold-mib", "2"], tmp_path)
    try:
        port = listening_port(log, proc)
        wait_healthy(port, proc)
        for seed, n in ((0, SHORT), (1, SHORT), (2, SHORT), (3, LONG)):   # the long one used last
            r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=300, json={
                "model": "m", "prompt": prompt(seed, n), "max_tokens": 1, "temperature": 0})
            assert r.status_code == 200, r.text
        outlook = httpx.get(f"http://127.0.0.1:{port}/v1/monitor", timeout=30).json()["stop"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        stop_server(proc)
    text = log.read_text()
    assert "Traceback" not in text, text
    kept = {seed_of(json.loads(p.read_text())["tokens"]) for p in cold.glob("strata-conv-*.json")}
    assert kept == {1, 2, 3}, text            # before: {0, 1, 2}, the long one written then evicted
    assert "made room for newer ones" not in text, text   # nothing the stop wrote was let go within it
    keeping = [m for line in text.splitlines() if (m := KEEPING.search(line))]
    assert keeping and {int(m.group(1)) for m in keeping} == {3} and not any(m.group(4) for m in keeping), text
    assert outlook == {"keeps_on_disk": True, "conversations": 3}
