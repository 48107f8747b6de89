"""The saved-sessions folder's budget on a real `strata serve` (a subprocess, tiny model): the start-up INFO line,
/metrics and /v1/monitor show the folder's use and its budget; saves past the budget are a 507 storage_error
naming the flag, nothing written; the folder never above the budget; a restart measures the same use."""

from __future__ import annotations

import os
import random
import signal

import httpx2 as httpx

from tests.server.live import complete
from tests.server.test_auth_and_lifecycle import listening_port, start_cli, wait_healthy
from tests.server.test_metrics import scrape

BUDGET_MIB = 1
MIB = 1 << 20


def _folder_bytes(folder) -> int:
    return sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder)) if os.path.isdir(folder) else 0


def _serve(tiny_model, tmp_path, sessions):
    proc, log = start_cli(["--model", str(tiny_model), "--ctx", "4096", "--batch", "0", "--conversation-cache-mib",
                           "0", "--conversation-cache-sessions-dir", str(sessions),
                           "--conversation-cache-sessions-mib", str(BUDGET_MIB)], tmp_path)
    port = listening_port(log, proc)
    wait_healthy(port, proc)
    return proc, log, f"http://127.0.0.1:{port}"


def _stop(proc) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)


def test_saves_past_the_budget_are_refused_and_a_restart_sees_the_same_use(tiny_model, tmp_path):
    sessions = tmp_path / "sessions"
    rng = random.Random(7)
    proc, log, url = _serve(tiny_model, tmp_path, sessions)
    try:
        statuses, refused = [], None
        for i in range(20):                            # ~0.2-0.4 MiB a save: a few fit, then the budget is full
            complete(url, [11] + [rng.randrange(10, 500) for _ in range(999)])
            r = httpx.post(f"{url}/v1/sessions/s{i}/save", json={"slot": "main"}, timeout=120)
            statuses.append(r.status_code)
            assert _folder_bytes(sessions) <= BUDGET_MIB * MIB
            if r.status_code != 200:
                refused = r.json()["error"]
                break
        assert statuses[0] == 200 and statuses[-1] == 507, statuses
        assert refused["type"] == "storage_error" and "--conversation-cache-sessions-mib" in refused["message"]
        assert f"session 's{len(statuses) - 1}' not saved: the sessions folder {sessions}" in refused["message"]
        listed = httpx.get(url + "/v1/sessions", timeout=30).json()["data"]
        assert len(listed) == len(statuses) - 1
        used = _folder_bytes(sessions)
        metrics = scrape(url)
        assert metrics["strata_cache_sessions_folder_bytes"] == used
        assert metrics["strata_cache_sessions_budget_bytes"] == BUDGET_MIB * MIB
        assert metrics["strata_cache_session_refusals_total"] == 1
        shown = httpx.get(url + "/v1/monitor", timeout=30).json()["cache"]["sessions_folder"]
        assert (shown["used_mib"], shown["budget_mib"], shown["entries"]) == (round(used / MIB, 1), 1, len(listed))
    finally:
        _stop(proc)
    first = log.read_text()
    assert f"; sessions {sessions} 0.0 of {BUDGET_MIB} MiB (reject when full) | listening on" in first, first
    proc, log, url = _serve(tiny_model, tmp_path, sessions)
    try:
        assert scrape(url)["strata_cache_sessions_folder_bytes"] == used
    finally:
        _stop(proc)
    assert f"; sessions {sessions} {used / MIB:.1f} of {BUDGET_MIB} MiB (reject when full) |" in log.read_text()
