"""The agent soak (benchmarks/soak_agents.py) passes extra flags to its server (--serve-arg, repeated), so a soak
can run with a sessions folder budget its saves reach; its summary counts what that budget does: a guarded save of
a check refused by it (507) says nothing of the save checked, and /metrics' refusals, evictions and the tokens a
code completion moved into place (--cache-reuse) are read at each phase's drained end.

The first test starts a real `strata serve` (the tiny model) through the soak's own Server, in a subprocess."""

from __future__ import annotations

import socket

import httpx2 as httpx

from benchmarks.soak_agents import Server, parse_metrics, parser
from benchmarks.soak_summary import summarize


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_args_reach_the_server(tiny_model, tmp_path):
    args = parser().parse_args(["--port", str(free_port()), "--root", str(tmp_path),
                                "--serve-arg=--conversation-cache-sessions-mib=3",
                                "--serve-arg=--conversation-cache-sessions-when-full=evict"])
    args.model = str(tiny_model)
    server = Server(args, tmp_path)
    server.start()
    try:
        metrics = parse_metrics(httpx.get(server.url + "/metrics", timeout=30).text)
    finally:
        stopped = server.stop()
    assert metrics["strata_cache_sessions_budget_bytes"] == 3 * 2**20
    assert stopped["rc"] == 0
    assert "0.0 of 3 MiB (evict when full)" in server.log_path.read_text()


def test_no_serve_arg_adds_nothing():
    assert parser().parse_args([]).serve_arg == []


def check(status: int, right: bool, guard_status: int | None = 200) -> dict:
    return {"kind": "session_check", "status": status, "right": right, "guard_status": guard_status,
            "cached_from_main": right, "phase": 1}


def test_a_check_whose_guarded_save_the_budget_refused_is_not_a_wrong_save():
    records = [{"kind": "request", "phase": 1, "agent": "session", "conv": "s-1", "req": "turn", "prompt": 900,
                "cached": 0, "ideal": 0},
               check(200, True), check(200, False, 507), check(200, False)]
    got = summarize(records)["phases"][1]["session_checks"]
    assert got == {"right": 1, "wrong": 1, "guard_409": 0, "guard_507": 1, "restore_not_done": 0,
                   "cached_from_main": 1}


def test_the_budget_s_and_the_shift_s_counters_are_read_at_the_drained_end():
    metrics = {"strata_prompt_tokens_shifted_total": 1234.0, "strata_cache_session_refusals_total": 5.0,
               "strata_cache_session_evictions_total": 2.0}
    records = [{"kind": "request", "phase": 1, "agent": "editor", "conv": "e", "req": 1, "prompt": 10,
                "cached": 0, "ideal": 0},
               {"kind": "final_sample", "phase": 1, "metrics": metrics, "folders": {}, "VmRSS": 1024,
                "VmHWM": 1024, "fds": 5, "Threads": 3, "log_bytes": 0}]
    got = summarize(records)["phases"][1]["metrics"]
    assert (got["shifted"], got["session_refusals"], got["session_evictions"]) == (1234.0, 5.0, 2.0)
