"""The monitor feed is live while a request runs: `totals.generated_tokens` counts tokens as they are
made and the slot's `decode_tps` / `prefill_tps` fill in during generation and during a long prefill,
not only when the request ends. The scheduler's worker is held still between two steps (through its
own `call` hook) while the test reads `GET /v1/monitor` over HTTP, so nothing here races the engine.
"""

from __future__ import annotations

import threading

import httpx2 as httpx
import pytest
from strata.monitor.model import MonitorModel

from tests.server.live import LiveServer


@pytest.fixture(scope="module")
def chunked_server(tiny_model):
    """Solo path plus 2 slots, prompts read 64 tokens a step so a long prompt takes many steps."""
    server = LiveServer(model=str(tiny_model), ctx=4096, batch=2, slot_ctx=2048, threads=1, prefill_chunk=64,
                        conversation_cache_mib=0)
    server.start()
    yield server
    server.stop()


class Pause:
    """Holds the scheduler's worker between two steps the first time `cond(rows)` holds."""

    def __init__(self, sched, cond) -> None:
        self.sched, self.cond = sched, cond
        self.paused, self.release = threading.Event(), threading.Event()
        sched.call(self._probe)

    def _probe(self) -> None:
        if self.release.is_set():
            return
        if self.cond(list(self.sched._rows.values())):
            self.paused.set()
            self.release.wait(60)
        else:
            self.sched.call(self._probe)

    def wait(self) -> None:
        assert self.paused.wait(60), "the request never reached the awaited point"


def post_in_background(url: str, body: dict) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        out["response"] = httpx.post(url + "/v1/completions", json=body, timeout=120)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def feed(url: str) -> dict:
    r = httpx.get(url + "/v1/monitor", timeout=30)
    assert r.status_code == 200
    return r.json()


def busy_slot(snap: dict, state: str) -> dict:
    slots = [s for s in snap["slots"] if s["state"] == state]
    assert len(slots) == 1, snap["slots"]
    return slots[0]


def test_generated_tokens_and_decode_rate_are_live(chunked_server):
    sched = chunked_server.state.scheduler
    model = MonitorModel()
    before = feed(chunked_server.url)["totals"]["generated_tokens"]
    first = Pause(sched, lambda rows: any(r.phase == "decode" and len(r.generated) >= 20 for r in rows))
    thread, out = post_in_background(chunked_server.url, {"prompt": "Once", "max_tokens": 300, "ignore_eos": True})
    try:
        first.wait()
        snap1 = feed(chunked_server.url)
        second = Pause(sched, lambda rows: any(r.phase == "decode" and len(r.generated) >= 120 for r in rows))
        first.release.set()
        second.wait()
        snap2 = feed(chunked_server.url)
        second.release.set()
    finally:
        first.release.set()
        thread.join(120)
    assert out["response"].status_code == 200
    gen1 = snap1["totals"]["generated_tokens"] - before
    gen2 = snap2["totals"]["generated_tokens"] - before
    assert 20 <= gen1 < 300 and 120 <= gen2 < 300 and gen2 > gen1
    for snap in (snap1, snap2):
        slot = busy_slot(snap, "decode")
        assert isinstance(slot.get("decode_tps"), (int, float)) and slot["decode_tps"] > 0, slot
    after = feed(chunked_server.url)["totals"]["generated_tokens"]
    assert after - before == 300                           # counted once: live, not again at the end

    # the monitor's model shows them: a generation rate from the totals and a decode plot point
    model.apply(snap1)
    model.apply(snap2)
    view = model.view()
    assert view.generated_tps is not None and view.generated_tps > 0
    row = next(s for s in view.slots if s.state == "decode")
    assert row.decode_tps is not None and row.decode_tps > 0
    assert view.decode_history[row.key][-1][1] > 0


def test_prefill_rate_is_live_during_a_long_prefill(chunked_server):
    sched = chunked_server.state.scheduler
    prompt = " ".join(f"w{i}" for i in range(700))            # over 1,000 tokens: many 64-token steps
    pause = Pause(sched, lambda rows: any(r.phase == "prefill" and r.prefill_chunks >= 3 for r in rows))
    thread, out = post_in_background(chunked_server.url, {"prompt": prompt, "max_tokens": 2})
    try:
        pause.wait()
        snap = feed(chunked_server.url)
    finally:
        pause.release.set()
        thread.join(120)
    assert out["response"].status_code == 200
    slot = busy_slot(snap, "prefill")
    assert isinstance(slot.get("prefill_tps"), (int, float)) and slot["prefill_tps"] > 0, slot
    assert "decode_tps" not in slot                          # not applicable yet (no leftover from before)
