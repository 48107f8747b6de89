"""The monitor model on feed snapshots recorded from a real server (tests/data/monitor/, written by
tests/monitor/record_feed.py), without Qt."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from strata.monitor import units
from strata.monitor.model import FeedError, MonitorModel, admission_headroom, request_reuse

DATA = Path(__file__).resolve().parents[1] / "data" / "monitor"


def load(name: str):
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def fed(*snapshots, **kw) -> MonitorModel:
    m = MonitorModel(**kw)
    for s in snapshots:
        m.apply(s)
    return m


def test_the_model_imports_no_qt():
    code = "import sys, strata.monitor.model, strata.monitor.client, strata.monitor.units; " \
           "print(any(k.startswith('PySide6') for k in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_idle_server():
    snap = load("idle.json")
    view = fed(snap).view()
    assert [s.label for s in view.slots] == ["main", "slot 1", "slot 2"]
    assert all(s.state == "empty" and s.tokens == 0 for s in view.slots)
    assert view.requests == ()
    assert view.reuse_share is None              # no prompt yet: not a fake 0 %
    assert view.generated_tps is None            # one snapshot: no rate yet
    assert view.cache["park_target"] == "disk"
    assert [lv["name"] for lv in view.cache["levels"]] == ["ram", "warm", "cold"]
    assert view.ready and view.busy_slots == 0
    assert view.now == snap["time"]


def test_series_under_load_fills_the_histories():
    series = load("series.json")
    view = fed(*series).view()
    n = len(series)
    assert set(view.prefill_history) == {"main", "1", "2"}
    assert all(len(h) == n for h in view.prefill_history.values())
    assert [t for t, _ in view.parks_history["disk"]] == [s["time"] for s in series]
    assert [v for _, v in view.parks_history["disk"]] == [s["cache"]["parks"]["disk"] for s in series]
    assert len(view.available_history) == n
    # the overall generation rate: generated-token delta over time delta of the last two snapshots
    a, b = series[-2], series[-1]
    expected = (b["totals"]["generated_tokens"] - a["totals"]["generated_tokens"]) / (b["time"] - a["time"])
    assert view.generated_tps == pytest.approx(expected)
    assert view.history_span == pytest.approx(series[-1]["time"] - series[0]["time"])


def test_a_slot_speed_is_plotted_while_it_works_and_zero_when_idle():
    series = load("series.json")
    view = fed(*series).view()
    for i, snap in enumerate(series):
        for s in snap["slots"]:
            t, v = view.decode_history[str(s["id"])][i]
            assert t == snap["time"]
            if s["state"] in ("prefill", "decode"):
                assert v == (s.get("decode_tps") or 0.0)
            elif i == 0 or s.get("last_use") == next(p for p in series[i - 1]["slots"] if p["id"] == s["id"]).get(
                    "last_use"):
                assert v == 0.0                  # idle and nothing finished since the last snapshot


def test_an_idle_slot_whose_last_use_jitters_reads_zero():
    """A server's `last_use` jitters by a microsecond between snapshots (wall time made from a monotonic
    one each time); the idle slot was plotted at its last decode speed every other snapshot (new-user
    trial: slot 1 at 112 tok/s, 12 s after its last request)."""
    series = load("series.json")
    snap = copy.deepcopy(series[-1])
    slot = next(s for s in snap["slots"] if s["state"] == "idle" and s.get("last_use") and s.get("decode_tps"))
    snaps = []
    for i in range(4):
        s2 = copy.deepcopy(snap)
        s2["time"] = snap["time"] + i
        next(s for s in s2["slots"] if s["id"] == slot["id"])["last_use"] = slot["last_use"] + (i % 2) * 2e-6
        snaps.append(s2)
    view = fed(*snaps).view()
    assert [v for _, v in view.decode_history[str(slot["id"])]] == [0.0] * 4


def test_requests_newest_first_with_reuse_and_mismatch():
    snap = load("after.json")
    view = fed(snap).view()
    ids = [r["id"] for r in view.requests]
    assert ids == [r["id"] for r in reversed(snap["requests"])]
    changing = [r for r in view.requests if (r.get("mismatch_excerpt") or "").startswith("time ")]
    assert changing, "the recorded agent that changes the top of its prompt"
    for r in changing:
        assert r["mismatch_at"] < 16 and request_reuse(r) < 0.05
    share = view.reuse_share
    assert share == snap["totals"]["prompt_tokens_reused"] / snap["totals"]["prompt_tokens"]


def test_slot_rows_carry_policy_values_and_idle_time():
    snap = load("after.json")
    view = fed(snap).view()
    by_key = {s.key: s for s in view.slots}
    for raw in snap["slots"]:
        row = by_key[str(raw["id"])]
        assert row.tokens == raw["tokens"] and row.capacity == raw["capacity"]
        assert row.value == raw.get("value") and row.protection_left_s == raw.get("protection_left_s")
        if raw.get("last_use") is not None:
            assert row.idle_s == pytest.approx(snap["time"] - raw["last_use"])
        else:
            assert row.idle_s is None


def test_admission_headroom():
    cache = load("after.json")["cache"]
    adm = cache["admission"]
    h = admission_headroom(cache)
    assert h["min_free_mib"] == pytest.approx(adm["available_mib"] - adm["min_free_mib"])
    assert h["park_min_free_mib"] == pytest.approx(adm["available_mib"] - adm["park_min_free_mib"])
    assert admission_headroom({}) == {"min_free_mib": None, "park_min_free_mib": None}


def test_a_new_server_process_starts_the_history_again():
    after, idle = load("after.json"), copy.deepcopy(load("idle.json"))
    idle["time"] = after["time"] + 5            # later, but every total is back to zero
    view = fed(*load("series.json"), idle).view()
    assert len(view.parks_history["disk"]) == 1
    assert all(len(h) == 1 for h in view.decode_history.values())
    assert view.generated_tps is None


def test_old_history_is_trimmed():
    series = load("series.json")
    span = series[-1]["time"] - series[0]["time"]
    view = fed(*series, history_s=span / 2).view()
    kept = view.parks_history["disk"]
    assert 1 <= len(kept) < len(series)
    assert all(t >= series[-1]["time"] - span / 2 for t, _ in kept)


def test_versions_and_connection_state():
    m = MonitorModel()
    v0 = m.version
    m.set_connection("connecting", "http://x")
    m.set_connection("connecting", "http://x")    # no change, no new version
    assert m.version == v0 + 1
    m.apply(load("idle.json"))
    assert m.version == v0 + 2
    m.set_connection("disconnected", "cannot reach http://x: refused")
    view = m.view()
    assert view.connection == "disconnected" and "refused" in view.connection_detail
    with pytest.raises(ValueError, match="connection state"):
        m.set_connection("sleeping")


@pytest.mark.parametrize("bad, message", [
    ([], "expected a JSON object, got list"),
    ({}, "'time' must be a number"),
    ({"time": "now"}, "'time' must be a number"),
    ({"time": 1.0, "slots": {}}, "'slots' must be a list"),
    ({"time": 1.0, "cache": []}, "'cache' must be an object"),
])
def test_bad_snapshots_are_refused_with_the_reason(bad, message):
    m = MonitorModel()
    with pytest.raises(FeedError, match=message):
        m.apply(bad)
    assert m.view().snapshot == {}


def test_absent_fields_stay_absent():
    view = fed({"time": 10.0, "slots": [{"id": 1, "state": "idle"}], "requests": [{"id": 3}]}).view()
    row = view.slots[0]
    assert row.prefill_tps is None and row.value is None and row.idle_s is None
    assert request_reuse(view.requests[0]) is None
    assert view.cache == {} and view.totals == {}


def test_bad_parameters():
    with pytest.raises(ValueError, match="history_s"):
        MonitorModel(history_s=0)
    with pytest.raises(ValueError, match="max_points"):
        MonitorModel(max_points=1)


def test_a_decoding_slot_reads_zero_on_the_prefill_plot():
    """A slot keeps its request's prefill speed through the decode that follows (the server reports it until
    the next request); the prefill plot drew that speed flat for the whole decode (new-user trial: four slots
    at 213 tok/s of prefill for 5 s while they only decoded). The decode plot likewise reads 0 in prefill."""
    base = load("series.json")[-1]
    states = ["idle", "prefill", "decode", "decode", "decode", "idle",    # a request seen in each phase
              "idle", "decode", "decode", "idle",                          # a prefill too short to be seen
              "idle"]                                                      # (a whole request between two)
    snaps, last_use = [], 100.0
    for i, state in enumerate(states):
        snap = copy.deepcopy(base)
        snap["time"] = base["time"] + i
        slot = next(s for s in snap["slots"] if s["id"] == 1)
        if i in (5, 9, 10):
            last_use += 1          # a request ended since the last snapshot
        slot.update(state=state, last_use=last_use, prefill_tps=500.0, decode_tps=None if state == "prefill" else 30.0)
        snaps.append(snap)
    view = fed(*snaps).view()
    prefill = [v for _, v in view.prefill_history["1"]]
    decode = [v for _, v in view.decode_history["1"]]
    assert prefill == [0.0, 500.0, 0.0, 0.0, 0.0, 0.0, 0.0, 500.0, 0.0, 0.0, 500.0]
    assert decode == [0.0, 0.0, 30.0, 30.0, 30.0, 30.0, 0.0, 30.0, 30.0, 30.0, 30.0]


def test_a_new_server_process_seen_while_it_loads_starts_the_history_again():
    """The app's feed reconnects to a restarted server while it still loads the model: those snapshots carry
    no totals, and the next one's zeros were compared with them, so nothing "fell" and the old process's
    curves and parks stayed on the plots beside the new one's (new-user trial, kill -9 under the app)."""
    series, idle = load("series.json"), copy.deepcopy(load("idle.json"))
    loading = {"time": series[-1]["time"] + 2, "ready": False, "version": idle.get("version")}
    idle["time"] = series[-1]["time"] + 5
    view = fed(*series, loading, idle).view()
    assert len(view.parks_history["disk"]) == 1
    assert all(len(h) == 1 for h in view.decode_history.values())
    assert view.history_start == idle["time"]


def test_the_generation_rate_needs_a_live_feed():
    """The header's 'generating N tok/s' is the rate between the last two snapshots: after the feed was
    lost (the server stopped or crashed while generating) it kept saying the last one, beside
    'disconnected', for as long as the window stayed open; and the first snapshot after reconnecting
    was compared with the last one before, a rate over the whole gap, drawn as the rate now."""
    from strata.monitor.widgets.header import totals_text

    series = load("series.json")
    m = fed(*series[:-1])
    m.set_connection("connected", "http://x")
    assert m.view().generated_tps > 0
    m.set_connection("disconnected", "cannot reach http://x: refused")
    view = m.view()
    assert view.generated_tps is None
    text = totals_text(view).replace(units.NBSP, " ")
    assert "generating \u2013" in text and "\u2013 running, \u2013 queued" in text, text
    m.set_connection("connecting", "http://x")
    last = copy.deepcopy(series[-1])
    last["time"] = series[-2]["time"] + 60           # the feed came back a minute later
    m.apply(last)
    m.set_connection("connected", "http://x")
    assert m.view().generated_tps is None             # one snapshot of the new feed: no rate yet
    nxt = copy.deepcopy(last)
    nxt["time"] += 0.5
    nxt["totals"]["generated_tokens"] += 50
    m.apply(nxt)
    assert m.view().generated_tps == pytest.approx(100.0)


def test_what_runs_now_needs_a_live_feed_while_connecting_too():
    """'N running, M queued' is the last snapshot's: a55700a dashed it while disconnected or waiting, but the
    app sets 'connecting: starting the server' for a restarted server's whole load (and the feed client
    'connecting' before each retry), and the header said the stopped server's slots were still running."""
    from strata.monitor.widgets.header import totals_text

    series = load("series.json")
    m = fed(*series[:-1])                            # two slots decoding
    m.set_connection("connected", "http://x")
    running = m.view().busy_slots
    assert running > 0 and f"{running} running" in totals_text(m.view()).replace(units.NBSP, " ")
    m.set_connection("connecting", "starting the server")
    assert "\u2013 running, \u2013 queued" in totals_text(m.view()).replace(units.NBSP, " ")


def test_an_idle_slot_reads_zero_across_a_wall_clock_step():
    """The server's `last_use` is its monotonic time made wall time (placement.WallOffset), which follows a step of
    its wall clock (NTP, a VM's clock set, a resume): every idle slot's `last_use` then moved by the step at once,
    and the monitor took each for a request ended since, plotting it at its last decode speed. Compared on the
    feed's monotonic clock (`time` - `mono`), the step moves nothing."""
    snap = copy.deepcopy(load("series.json")[-1])
    slot = next(s for s in snap["slots"] if s["state"] == "idle" and s.get("last_use") and s.get("decode_tps"))
    snaps = []
    for i in range(4):
        s2 = copy.deepcopy(snap)
        step = 25.0 if i >= 2 else 0.0
        s2["time"], s2["mono"] = 1000.0 + i + step, 10.0 + i
        for other in s2["slots"]:          # a real server's every `last_use` moves with the step
            if isinstance(other.get("last_use"), (int, float)):
                other["last_use"] = (990.0 if other["id"] == slot["id"] else other["last_use"]) + step
        snaps.append(s2)
    view = fed(*snaps).view()
    assert [v for _, v in view.decode_history[str(slot["id"])]] == [0.0] * 4


def test_an_idle_slot_reads_zero_through_the_feeds_clock_jitter():
    """A snapshot's `time` and `mono` are two clock reads: their difference moves by the time between them (a few
    milliseconds where the server's thread is preempted there). Taken per snapshot, that moved every idle slot's
    `last_use` past _changed's millisecond, each plotted as a request just ended; the offset is held steady as the
    server's wall_of holds its own (a step past WALL_STEP_S is followed: the test above)."""
    snap = copy.deepcopy(load("series.json")[-1])
    slot = next(s for s in snap["slots"] if s["state"] == "idle" and s.get("last_use") and s.get("decode_tps"))
    snaps = []
    for i, jitter in enumerate((0.0, 0.004, -0.003, 0.006)):
        s2 = copy.deepcopy(snap)
        s2["time"], s2["mono"] = 1000.0 + i + jitter, 10.0 + i
        for other in s2["slots"]:          # the server's steady offset: every `last_use` stays as it was
            if other["id"] == slot["id"]:
                other["last_use"] = 990.0
        snaps.append(s2)
    view = fed(*snaps).view()
    assert [v for _, v in view.decode_history[str(slot["id"])]] == [0.0] * 4
