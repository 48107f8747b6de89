"""While an answer streams, the totals a user sees agree with each other: /metrics and the monitor feed count
a request's prompt once it has been read (at its first token), its tokens as they are made, and the request
itself when it ends (the running one is in flight), and the monitor header says which is which. A new-user
trial's app read "0 requests \u2022 prompt 0 tok \u2022 generated 108 tok" during a first answer: the prompt
counters moved only at a request's end, the generated one at each token.

A real server on loopback (tiny model, solo path) and a real streamed client that leaves midway; the
scheduler's worker is held inside an engine call (sched_stress.Pause) while the test reads /metrics and
/v1/monitor, and the header is the real widget's text, offscreen."""

from __future__ import annotations

import time

import httpx2 as httpx
import pytest
from strata.monitor import units
from strata.monitor.model import MonitorModel
from strata.monitor.window import MonitorWindow

from tests.server.live import LiveServer
from tests.server.sched_stress import Client, Pause
from tests.server.test_metrics import scrape

CHUNK = 64


@pytest.fixture(scope="module")
def server(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=4096, batch=0, threads=1, prefill_chunk=CHUNK,
                    conversation_cache_mib=0) as s:
        yield s


def stream_body(text: str) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 400, "ignore_eos": True,
            "temperature": 0, "stream": True}


def requests_done(m: dict[str, float]) -> float:
    return sum(v for k, v in m.items() if k.startswith("strata_requests_total{"))


def reused(m: dict[str, float]) -> float:
    return sum(v for k, v in m.items() if k.startswith("strata_prompt_tokens_reused_total{"))


def header_text(qtbot, snap: dict, url: str) -> str:
    """The monitor window's header line of totals for one feed snapshot, as drawn."""
    model = MonitorModel()
    model.apply(snap)
    model.set_connection("connected", url)
    window = MonitorWindow(model, theme="light")
    qtbot.addWidget(window)
    window.show()
    window.redraw()
    return window.header.totals.text().replace(units.NBSP, " ")   # as read: no-break spaces keep items whole


def agrees(m: dict[str, float], snap: dict, text: str) -> None:
    """/metrics, the feed's totals and the header's text say the same numbers."""
    t = snap["totals"]
    assert (t["requests"], t["in_flight"], t["queue_depth"]) == (
        requests_done(m), m["strata_requests_in_flight"], m["strata_queue_depth"]), t
    assert (t["prompt_tokens"], t["prompt_tokens_read"], t["prompt_tokens_reused"], t["generated_tokens"]) == (
        m["strata_prompt_tokens_total"], m["strata_prompt_tokens_read_total"], reused(m),
        m["strata_generated_tokens_total"]), t
    running = int(m["strata_requests_in_flight"])
    assert text.startswith(f"{units.counted(requests_done(m), 'request')} done, {running} running, 0 queued \u2022"), text
    assert f"prompt {units.tokens(m['strata_prompt_tokens_total'])}, reused" in text, text
    assert text.endswith(f"generated {units.tokens(m['strata_generated_tokens_total'])}"), text


def ended(server: LiveServer, n: int) -> list[dict]:
    """The requests' entries once `n` have ended and nothing runs."""
    sched = server.state.scheduler
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(list(sched.requests)) >= n and sched.in_flight == 0:
            return list(sched.requests)
        time.sleep(0.02)
    raise TimeoutError("the request did not end")


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0) for k, v in after.items()}


def test_a_streaming_answer_shows_its_prompt_and_tokens_and_runs_apart(server, qtbot):
    sched = server.state.scheduler
    before = scrape(server.url)
    n_before = len(list(sched.requests))
    generating = lambda *a, **k: any(len(r.generated) >= 5 for r in list(sched._rows.values()))  # noqa: E731
    with Pause(server.state.engine, "decode extend step", when=generating) as held:
        client = Client(server.url + "/v1/chat/completions", "chat_stream", stream_body("read me first " * 30))
        assert held.entered.wait(60)
        (row,) = list(sched._rows.values())
        prompt, made = len(row.job.prompt), len(row.generated)
        during = scrape(server.url)
        snap = httpx.get(server.url + "/v1/monitor", timeout=30).json()
        text = header_text(qtbot, snap, server.url)
        client.leave()                     # midway: its client goes; the worker sees it once released
        sched.cancel(row.job)              # as the server does on the closed connection, here at a known step
    d = delta(during, before)
    # its prompt is read: counted (read + reused); its tokens so far; the request itself running, not done
    assert d["strata_prompt_tokens_total"] == prompt > 0, (d["strata_prompt_tokens_total"], prompt)
    assert d["strata_prompt_tokens_read_total"] + delta({"r": reused(during)}, {"r": reused(before)})["r"] == prompt
    assert d["strata_generated_tokens_total"] == made >= 5
    assert requests_done(during) == requests_done(before) and during["strata_requests_in_flight"] == 1
    agrees(during, snap, text)
    assert text.startswith(f"{units.counted(requests_done(before), 'request')} done, 1 running"), text

    # cancelled midway: its prompt stays counted, once; the request is counted now that it ended
    entries = ended(server, n_before + 1)
    after = scrape(server.url)
    d = delta(after, before)
    rec = entries[-1]
    assert rec["status"] == "cancelled" and rec["prompt_tokens"] == prompt, rec
    assert d["strata_prompt_tokens_total"] == prompt
    assert d["strata_prompt_tokens_read_total"] + reused(after) - reused(before) == prompt
    assert d['strata_requests_total{status="cancelled"}'] == 1 and requests_done(after) == requests_done(before) + 1
    assert d["strata_generated_tokens_total"] == rec["output_tokens"] > made
    snap = httpx.get(server.url + "/v1/monitor", timeout=30).json()
    agrees(after, snap, header_text(qtbot, snap, server.url))


def test_a_prompt_being_read_counts_at_its_end_with_what_was_read(server, qtbot):
    """Before its first token a prompt is not counted (nothing of it is whole); a request that leaves
    then counts the whole prompt, of which only the part read as read."""
    sched = server.state.scheduler
    before = scrape(server.url)
    n_before = len(list(sched.requests))
    reading = lambda *a, **k: any(r.prefill_chunks >= 2 for r in list(sched._rows.values()))  # noqa: E731
    with Pause(server.state.engine, "prefill step", when=reading) as held:
        client = Client(server.url + "/v1/chat/completions", "chat_stream",
                        stream_body(" ".join(f"w{i}" for i in range(700))))
        assert held.entered.wait(60)
        (row,) = list(sched._rows.values())
        prompt, ctx = len(row.job.prompt), row.ctx
        during = scrape(server.url)
        snap = httpx.get(server.url + "/v1/monitor", timeout=30).json()
        text = header_text(qtbot, snap, server.url)
        client.leave()
        sched.cancel(row.job)              # at a known piece: the tiny model reads the rest in milliseconds
    assert prompt > 4 * CHUNK
    d = delta(during, before)
    assert (d["strata_prompt_tokens_total"], d["strata_prompt_tokens_read_total"],
            d["strata_generated_tokens_total"]) == (0, 0, 0)
    assert during["strata_requests_in_flight"] == 1
    agrees(during, snap, text)

    entries = ended(server, n_before + 1)
    after = scrape(server.url)
    d = delta(after, before)
    rec = entries[-1]
    assert rec["status"] == "cancelled" and rec["output_tokens"] == 0, rec
    read = len(sched.table[ctx].tokens) - rec["reused_tokens"]      # what the context holds of it
    assert d["strata_prompt_tokens_total"] == prompt
    assert 0 < d["strata_prompt_tokens_read_total"] == read < prompt - rec["reused_tokens"]
    snap = httpx.get(server.url + "/v1/monitor", timeout=30).json()
    agrees(after, snap, header_text(qtbot, snap, server.url))
