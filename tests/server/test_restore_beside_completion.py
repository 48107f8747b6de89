"""A session restore does not wait on an editor's code completion (a real `strata serve` in a subprocess, the tiny
model with fill-in-the-middle tokens, real HTTP). In the session-33 agent soak a user's restore into main waited its
30 s (SESSION_IDLE_WAIT_S) behind an editor's pause completion reading ~3,470 tokens there and was answered 503: a
save or restore waiting for a context ends the code completion running in it (answered with what it wrote), and
runs at once; an agent's request there is still waited for (test_session_waits_for_idle.py)."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time

import httpx2 as httpx

from tests.server.live import LiveServer
from tests.server.sched_stress import Pause
from tests.server.test_auth_and_lifecycle import listening_port, start_cli, wait_healthy
from tests.server.test_cache_and_policy import complete, ids

N_PREDICT = 3000        # with ignore_eos it writes all of them unless ended: ~3,100 of main's 4,096 tokens


def _serve(fim_coder, tmp_path):
    proc, log = start_cli(["--model", str(fim_coder), "--ctx", "4096", "--batch", "0", "--conversation-cache-mib",
                           "16", "--conversation-cache-sessions-dir", str(tmp_path / "sessions")], tmp_path)
    port = listening_port(log, proc)
    wait_healthy(port, proc)
    return proc, log, f"http://127.0.0.1:{port}"


class _Infill:
    """A streamed /infill (llama.vscode's request shape) on a thread: `first` is set at its first piece; `final`
    is its last event (stop true)."""

    def __init__(self, url: str) -> None:
        self.first, self.done = threading.Event(), threading.Event()
        self.pieces, self.final, self.status = 0, None, None
        body = {"input_prefix": "def f(x):\n    return x\n\n", "prompt": "y = ", "input_suffix": "print(y)\n",
                "n_predict": N_PREDICT, "ignore_eos": True, "temperature": 0, "stream": True}

        def run() -> None:
            try:
                with httpx.stream("POST", url + "/infill", json=body, timeout=300) as r:
                    self.status = r.status_code
                    for line in r.iter_lines():
                        if not line.startswith("data: "):
                            continue
                        event = json.loads(line[6:])
                        if event.get("stop"):
                            self.final = event
                        elif event.get("content"):
                            self.pieces += 1
                            self.first.set()
            finally:
                self.first.set()
                self.done.set()

        threading.Thread(target=run, daemon=True).start()


def test_a_restore_into_main_ends_the_code_completion_running_there(fim_coder, tmp_path):
    proc, log, url = _serve(fim_coder, tmp_path)
    try:
        complete(url, ids(300, 81))                                   # main's history, saved as session `work`
        saved = httpx.post(url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=60)
        assert saved.status_code == 200, saved.text
        n_work = saved.json()["n_tokens"]
        editor = _Infill(url)
        assert editor.first.wait(120) and editor.status == 200 and editor.pieces > 0
        restored = httpx.post(url + "/v1/sessions/work/restore", json={"slot": "main"}, timeout=120)
        assert editor.done.wait(120)
        assert restored.status_code == 200, restored.text              # before: after the completion's 3,000 tokens
        assert restored.json()["n_tokens"] == n_work
        final = editor.final
        assert final is not None and final["stop_type"] == "limit", final
        assert final["tokens_predicted"] < N_PREDICT, final              # ended for the restore (before: all 3,000)
        main = httpx.get(url + "/v1/slots", timeout=30).json()["slots"][0]
        assert main["conversation"] == "session:work" and main["tokens"] == n_work, main
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    text = log.read_text()
    assert "a code completion) in context main ends: a session save or restore waits for the context" in text, text
    assert "ERROR" not in text and "Traceback" not in text, text


def test_a_completion_whose_client_left_ends_cancelled_not_for_the_restore(fim_coder, tmp_path, caplog):
    """A completion whose client left (the editor typed on) and a restore for its context, seen in one pass: it
    ends as a cancelled request (its record, /metrics), not as one answered for the restore (status ok, and an
    INFO line saying the restore ended it). Before, the rule ran ahead of the cancelled requests' drop."""
    caplog.set_level(logging.INFO, logger="strata.server.scheduler")
    with LiveServer(model=str(fim_coder), ctx=4096, batch=0, threads=1, conversation_cache_mib=16,
                    conversation_cache_sessions_dir=str(tmp_path / "sessions")) as s:
        sched = s.state.scheduler
        complete(s.url, ids(300, 82))
        saved = httpx.post(s.url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=60)
        assert saved.status_code == 200, saved.text
        editor = _Infill(s.url)
        assert editor.first.wait(120) and editor.status == 200
        # the worker held inside its next engine step: what happens meanwhile is seen together at its next pass
        with Pause(s.state.engine, "decode step extend") as gate:
            assert gate.entered.wait(60)                     # the worker is in a decode step of the completion
            job = sched.table.main.busy_job is not None and next(iter(sched._rows.values())).job
            assert job and job.completion
            sched.cancel(job)                               # its client left (as the handler tells the scheduler)
            out: list = []
            t = threading.Thread(target=lambda: out.append(httpx.post(
                s.url + "/v1/sessions/work/restore", json={"slot": "main"}, timeout=120)), daemon=True)
            t.start()
            deadline = time.monotonic() + 30
            while not sched._calls:                         # the restore is in before the step ends
                assert time.monotonic() < deadline, "the restore never reached the scheduler"
                time.sleep(0.01)
            gate.release.set()
            t.join(120)
        assert out and out[0].status_code == 200, out and out[0].text
        record = next(r for r in s.state.scheduler.requests if r["id"] == job.id)
        assert record["status"] == "cancelled", record
        metrics = httpx.get(s.url + "/metrics", timeout=30).text
    lines = [r.getMessage() for r in caplog.records]
    assert not any("ends: a session save or restore waits" in m for m in lines), lines
    assert any(f"request {job.id} (" in m and "ended (cancelled)" in m for m in lines), lines
    assert 'status="cancelled"' in metrics, metrics


def test_only_the_completion_in_the_waited_context_ends(fim_coder, tmp_path, caplog):
    """main and one slot: an agent's stream in main, an editor's completion in the slot. A restore into main waits
    for the agent's stream and leaves the slot's completion running (it is not in the way); a restore into the slot
    then ends the completion there at once."""
    from tests.server.test_session_waits_for_idle import _SlowTokens, _Stream, _wait_for
    caplog.set_level(logging.INFO, logger="strata.server.scheduler")
    with LiveServer(model=str(fim_coder), ctx=4096, batch=1, slot_ctx=1024, threads=1, conversation_cache_mib=16,
                    conversation_cache_sessions_dir=str(tmp_path / "sessions")) as s:
        sched = s.state.scheduler
        complete(s.url, ids(300, 83))
        saved = httpx.post(s.url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=60)
        assert saved.status_code == 200, saved.text
        n_work = saved.json()["n_tokens"]
        sched.eos.clear()
        with _SlowTokens(s.state.engine):
            agent = _Stream(s.url, ids(20, 84), 1500)
            _wait_for(lambda: agent.lines > 0, "the agent's first token")
            editor = _Infill(s.url)
            assert editor.first.wait(120) and editor.status == 200
            main, slot = sched.table.main, sched.table[1]
            assert main.busy_job is not None and slot.busy_job is not None and slot.completion
            out: list = []
            t = threading.Thread(target=lambda: out.append(httpx.post(
                s.url + "/v1/sessions/work/restore", json={"slot": "main"}, timeout=120)), daemon=True)
            t.start()
            _wait_for(lambda: sched._deferred or out, "the restore into main to wait")
            pieces = editor.pieces
            _wait_for(lambda: editor.pieces >= pieces + 5 or editor.done.is_set(), "the completion to go on")
            assert not editor.done.is_set() and not out, out and out[0].text   # the slot's completion runs on
            agent.leave.set()                                # main's first idle moment: the restore runs
            t.join(60)
            assert out and out[0].status_code == 200 and out[0].json()["n_tokens"] == n_work, out and out[0].text
            assert not editor.done.is_set()
            r = httpx.post(s.url + "/v1/sessions/work/restore", json={"slot": 1}, timeout=120)
            assert r.status_code == 200, r.text             # into the slot: its completion ends for it
            assert editor.done.wait(60)
        final = editor.final
        assert final is not None and final["stop_type"] == "limit" and final["tokens_predicted"] < 900, final
        assert sched.table[1].conversation == "session:work" and len(sched.table[1].tokens) == n_work
        assert agent.done.wait(60)
    cut = [r.getMessage() for r in caplog.records if "ends: a session save or restore waits" in r.getMessage()]
    assert len(cut) == 1 and "in context 1 ends" in cut[0], cut


def _send_completion(url: str, api: str, stream: bool, out: list) -> None:
    """An editor's completion of N_PREDICT tokens (ignore_eos) through `api` (/infill or /v1/completions with a
    suffix), streamed or not: its last answer object (a stream's final event or chunk with usage) into `out`."""
    if api == "infill":
        path, body = "/infill", {"input_prefix": "def f(x):\n    return x\n\n", "prompt": "y = ",
                                 "input_suffix": "print(y)\n", "n_predict": N_PREDICT}
    else:
        path, body = "/v1/completions", {"prompt": "def f(x):\n    return x\n\ny = ", "suffix": "print(y)\n",
                                         "max_tokens": N_PREDICT}
    body.update(ignore_eos=True, temperature=0, stream=stream)
    if stream and api != "infill":      # OpenAI's 400 without a stream
        body["stream_options"] = {"include_usage": True}
    if not stream:
        r = httpx.post(url + path, json=body, timeout=300)
        out.append((r.status_code, r.json()))
        return
    events = []
    with httpx.stream("POST", url + path, json=body, timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    out.append((r.status_code, events))


def test_the_cut_completion_is_answered_in_each_api_streamed_or_not(fim_coder, tmp_path):
    """/infill and /v1/completions (a suffix), streamed and not: the completion a restore into main ends is answered
    as one that reached its limit (stop_type limit; finish_reason length), with what it wrote and its usage."""
    from tests.server.test_session_waits_for_idle import _SlowTokens, _wait_for
    with LiveServer(model=str(fim_coder), ctx=4096, batch=0, threads=1, conversation_cache_mib=16,
                    conversation_cache_sessions_dir=str(tmp_path / "sessions")) as s:
        sched = s.state.scheduler
        complete(s.url, ids(300, 85))
        saved = httpx.post(s.url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=60)
        assert saved.status_code == 200, saved.text
        for api in ("infill", "completions"):
            for stream in (True, False):
                case = (api, stream)
                out: list = []
                with _SlowTokens(s.state.engine):
                    t = threading.Thread(target=_send_completion, args=(s.url, api, stream, out), daemon=True)
                    t.start()
                    _wait_for(lambda: any(r.job.completion and len(r.generated) >= 3 for r in sched._rows.values()),
                              "the completion to write")
                    r = httpx.post(s.url + "/v1/sessions/work/restore", json={"slot": "main"}, timeout=120)
                    assert r.status_code == 200, (case, r.text)
                    t.join(60)
                assert out and out[0][0] == 200, (case, out)
                record = s.state.scheduler.requests[-1]
                n = record["output_tokens"]
                assert record["status"] == "ok" and 3 <= n < N_PREDICT, (case, record)
                answer = out[0][1]
                if api == "infill":
                    final = answer[-1] if stream else answer
                    assert final["stop"] and final["stop_type"] == "limit" and final["tokens_predicted"] == n, \
                        (case, final)
                    text = "".join(e.get("content", "") for e in answer) if stream else final["content"]
                else:
                    chunks = answer if stream else [answer]
                    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
                    assert reasons[-1] == "length" and all(x is None for x in reasons[:-1]), (case, reasons)
                    usage = chunks[-1]["usage"]
                    assert usage["completion_tokens"] == n and usage["prompt_tokens"] > 0, (case, usage)
                    text = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
                assert text, case                            # what it wrote before the cut came back
