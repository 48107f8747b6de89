"""The agent soak (benchmarks/soak_agents.py) logs why a session call failed: the status and the server's message
wherever it logs a session restore or save, and its summary counts the failures by that message. Session 31's
soak had a restore answered 503 and its log said only the status (the restore of a check logged no body at all).

A real server (the tiny model) and the soak's own SessionAgent, Server and Log: the session `soak-work` was never
saved, so every restore of it fails (a 404 whose message names it), and a save by messages no context holds fails."""

from __future__ import annotations

import json
import threading

import pytest

from benchmarks.soak_agents import Log, Server, SessionAgent, failure, parser
from benchmarks.soak_summary import session_failures, summarize
from tests.server.conftest import TINY_CTX
from tests.server.live import LiveServer


@pytest.fixture(scope="module")
def soak_server(tiny_model, tmp_path_factory):
    """The tiny model, its sessions folder a temporary one (the soak's session names are fixed: `soak-work`)."""
    server = LiveServer(model=str(tiny_model), ctx=TINY_CTX, batch=4, slot_ctx=2048, threads=1,
                        conversation_cache_sessions_dir=str(tmp_path_factory.mktemp("sessions")))
    server.start()
    yield server
    server.stop()


def session_agent(soak_server, tmp_path) -> tuple[SessionAgent, Log]:
    args = parser().parse_args(["--port", str(soak_server.port), "--check-saves", "--root", str(tmp_path)])
    server = Server(args, tmp_path)
    server.n = 1
    log = Log(tmp_path / "requests.jsonl")
    return SessionAgent(server, log, threading.Event(), threading.Event(), seed=1), log


def test_a_failed_restore_and_save_are_logged_with_the_server_s_message(soak_server, tmp_path):
    agent, log = session_agent(soak_server, tmp_path)
    agent.prev_prompt = 1
    agent.messages += [{"role": "assistant", "content": "An answer no context holds."},
                       {"role": "user", "content": "Next."}]
    agent.save(0, 10)                                       # nothing was read: no context holds these messages
    agent.chat(agent.messages, 0, "turn")                   # a turn: the summary's phase
    agent.saved = {"messages": agent.messages, "conv": agent.conv}
    agent.restore_and_branch()
    agent.check_save(agent.messages, 10)
    written = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    by_kind = {r["kind"]: r for r in written}
    restore, check, save = by_kind["session_restore"], by_kind["session_check"], by_kind["session_save"]
    for r in (restore, check, save):
        assert r["status"] != 200 and r["message"], r      # before: no message (the check's: no body at all)
        assert not r["message"].startswith("{"), r          # the error's message, not its JSON
    assert "soak-work" in restore["message"] and check["message"] == restore["message"]
    assert check["guard_status"] is None and "guard_message" not in check    # no guarded save after a failed restore
    failures = summarize(log.records)["phases"][1]["session_failures"]
    assert failures == {f"session_restore {restore['status']}: {restore['message']}": 1,
                        f"session_check restore {check['status']}: {check['message']}": 1,
                        f"session_save {save['status']}: {save['message']}": 1}, failures


def test_a_body_that_is_not_json_is_logged_as_its_text(soak_server):
    """A proxy's or a dying server's answer (not the server's JSON error) is logged as its text."""
    import httpx2 as httpx
    got = failure(httpx.Response(502, text="<html>Bad Gateway</html>"), "guard_")
    assert got == {"guard_status": 502, "guard_message": "<html>Bad Gateway</html>"}
    r = httpx.get(soak_server.url + "/no/such/path", timeout=30)
    assert failure(r) == {"status": 404, "message": "no endpoint GET /no/such/path"}
    assert failure(httpx.get(soak_server.url + "/health", timeout=30)) == {"status": 200}


def test_records_from_before_the_messages_say_none_was_logged():
    records = [{"kind": "session_check", "status": 503, "guard_status": None, "right": False, "phase": 1},
               {"kind": "session_slot_guard", "status": 409, "message": "slot 2 holds another history", "phase": 1},
               {"kind": "session_save", "status": 200, "phase": 1}]
    assert session_failures(records) == {"session_check restore 503: (no message logged)": 1,
                                         "session_slot_guard 409: slot 2 holds another history": 1}
