"""A clean stop keeps the most recently USED histories, not the most recently parked (a reviewer's find in
test_stop_plans_what_cold_keeps: cold kept seeds 1 and 5, and 4 and 3, used after 1, were dropped). The contexts'
histories are parked at the stop itself, so an idle slot's history from the first minutes looked newest and pushed
out RAM's, used since; now a park carries its context's last use (slots.idle_s, RamEntry.used_at) and the stop's
plan (stop_writes.hand_down_picks) and the feed's outlook order by it.

A real `strata serve` in a subprocess (the tiny model, 256 bytes of KV a token; RAM level 64 MiB, parks to RAM,
cold alone below it at 1 MiB, two slots): six conversations of 1,500 tokens (0.37 MiB each) used one after the
other, then SIGTERM. Cold holds two: the two used last (seeds 4 and 5), their files there, the stop's lines and the
outlook saying 2."""

from __future__ import annotations

import json
import signal

import httpx2 as httpx

from tests.server.test_auth_and_lifecycle import listening_port, start_cli, stop_server, wait_healthy
from tests.server.test_stop_plans_what_cold_keeps import KEEPING, NOT_WRITTEN, prompt

N_TOKENS = 1500


def seed_of(tokens: list[int]) -> int:
    """Which conversation of the test a kept history is (its prompt's tokens lead it)."""
    seeds = [s for s in range(6) if tokens[:N_TOKENS] == prompt(s, N_TOKENS)]
    assert len(seeds) == 1, tokens[:8]
    return seeds[0]


def test_the_stop_keeps_the_two_used_last(tiny_model, tmp_path):
    cold = tmp_path / "cold"
    proc, log = start_cli(["--model", str(tiny_model), "--ctx", "4096", "--batch", "2", "--slot-ctx", "2048",
                           "--conversation-cache-mib", "64", "--conversation-cache-park", "ram",
                           "--conversation-cache-cold-dir", str(cold), "--conversation-cache-cold-mib", "1"], tmp_path)
    try:
        port = listening_port(log, proc)
        wait_healthy(port, proc)
        for seed in range(6):   # used in this order: 5 last, then 4
            r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=300, json={
                "model": "m", "prompt": prompt(seed, N_TOKENS), "max_tokens": 1, "temperature": 0})
            assert r.status_code == 200, r.text
        outlook = httpx.get(f"http://127.0.0.1:{port}/v1/monitor", timeout=30).json()["stop"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        stop_server(proc)
    text = log.read_text()
    assert "Traceback" not in text, text
    sidecars = {p.stem: json.loads(p.read_text()) for p in cold.glob("strata-conv-*.json")}
    kept = {seed_of(d["tokens"]) for d in sidecars.values()}
    assert kept == {4, 5}, text                           # before: {1, 5}, slot-held seed 1 parked last at the stop
    assert len(list(cold.glob("strata-conv-*.img"))) == 2, text
    keeping = [m for line in text.splitlines() if (m := KEEPING.search(line))]
    assert keeping and {int(m.group(1)) for m in keeping} == {2}, text
    unwritten = NOT_WRITTEN.findall(text)
    assert len(unwritten) == 4 and not {f"strata-conv-{k}" for k in unwritten} & set(sidecars), text
    assert outlook == {"keeps_on_disk": True, "conversations": 2}
