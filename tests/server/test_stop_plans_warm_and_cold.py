"""With a warm and a cold level below RAM a clean stop writes each history straight to the level that keeps it, and
only those (session 42, item C). The cascade's hand-downs decided there: RAM's were written oldest first, each
arrival in warm pushing warm's oldest down to cold and cold's out within the stop.

A real `strata serve` in a subprocess (the tiny model; RAM 64 MiB, parks to RAM, warm 1 MiB and cold 1 MiB):
six conversations of 1,500 tokens (0.37 MiB each), then SIGTERM. Warm keeps the two used last, cold the two before
them; the two oldest are not written; the lines and the feed's outlook say 4 (before: all six written, two
evicted, the outlook 6)."""

from __future__ import annotations

import json
import signal

import httpx2 as httpx

from tests.server.test_auth_and_lifecycle import listening_port, start_cli, stop_server, wait_healthy
from tests.server.test_stop_plans_what_cold_keeps import KEEPING, N_TOKENS, prompt, seed_of


def test_warm_keeps_the_newest_and_cold_the_next(tiny_model, tmp_path):
    warm, cold = tmp_path / "warm", tmp_path / "cold"
    proc, log = start_cli(["--model", str(tiny_model), "--ctx", "4096", "--batch", "2", "--slot-ctx", "2048",
                           "--conversation-cache-mib", "64", "--conversation-cache-park", "ram",
                           "--conversation-cache-warm-dir", str(warm), "--conversation-cache-warm-mib", "1",
                           "--conversation-cache-cold-dir", str(cold), "--conversation-cache-cold-mib", "1"], tmp_path)
    try:
        port = listening_port(log, proc)
        wait_healthy(port, proc)
        for seed in range(6):
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

    def kept(folder):
        return {seed_of(json.loads(p.read_text())["tokens"]) for p in folder.glob("strata-conv-*.json")}
    assert (kept(warm), kept(cold)) == ({4, 5}, {2, 3}), text
    assert "made room for newer ones" not in text and " let go (" not in text, text   # nothing evicted in the stop
    keeping = [m for line in text.splitlines() if (m := KEEPING.search(line))]
    assert keeping and {int(m.group(1)) for m in keeping} == {4} and not any(m.group(4) for m in keeping), text
    assert outlook == {"keeps_on_disk": True, "conversations": 4}
