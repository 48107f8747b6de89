"""The plots run on the server's monotonic clock (the feed's `mono`), so a step of its wall clock (NTP, a resume
from sleep) neither wipes their history (a step back: the model took it for a new server) nor draws a line across
the jump (a step forward: the points before it an hour off the axis, one segment joining them). A feed without
`mono` (an older server) is plotted on its wall clock as before. Real Qt (offscreen): the model fed the recorded
snapshots of a real server, re-timed; the screenshot is test-artifacts/monitor/wall-clock-step.png. The server's
own `mono`: a real `strata serve` in a subprocess."""

from __future__ import annotations

import copy
import json
import math
import time

import httpx2 as httpx
import pytest
from strata.monitor.model import MonitorModel

from tests.fixtures.qt import settle, shown_window
from tests.monitor.recorded import DATA
from tests.server.body_fuzz import start_serve, stop_serve

STEP_AT = 40          # snapshots before the step, as many after it
TICK_S = 0.25


def _snapshots(step_s: float, with_mono: bool = True) -> list[dict]:
    """A real server's last recorded snapshot, 4 a second, every context decoding (a speed that moves); its wall
    clock steps by `step_s` after STEP_AT of them while its monotonic clock goes on."""
    last = json.loads((DATA / "series.json").read_text(encoding="utf-8"))[-1]
    out = []
    for k in range(2 * STEP_AT):
        s = copy.deepcopy(last)
        s["time"] = last["time"] + k * TICK_S + (step_s if k >= STEP_AT else 0.0)
        if with_mono:
            s["mono"] = 5000.0 + k * TICK_S
        else:
            s.pop("mono", None)
        for slot in s["slots"]:
            slot["state"], slot["prefill_tps"] = "decode", 300.0
            slot["decode_tps"] = 30.0 + 10.0 * math.sin(k / 5.0)
        out.append(s)
    return out


def _fed(snaps: list[dict]) -> MonitorModel:
    m = MonitorModel()
    m.set_connection("connected", "http://127.0.0.1:8080")
    for s in snaps:
        m.apply(s)
    return m


@pytest.mark.parametrize("step_s", [-3600.0, 3600.0], ids=["back", "forward"])
def test_a_wall_clock_step_keeps_the_history_and_draws_no_jump(qtbot, artifacts, step_s):
    m = _fed(_snapshots(step_s))
    v = m.view()
    for key, points in v.decode_history.items():
        assert len(points) == 2 * STEP_AT, (key, len(points))          # before: only the 40 after a step back
    assert v.gaps == ()
    assert v.history_span == pytest.approx((2 * STEP_AT - 1) * TICK_S)   # before: 3610 s after a step forward
    assert v.now == _snapshots(step_s)[-1]["time"]                       # the "when" columns keep the wall clock
    w = shown_window(qtbot, m, (1280, 800))
    w.redraw(force=True)
    settle(qtbot, w)
    for curve in w.slots.decode_plot.getPlotItem().listDataItems():
        xs, ys = (list(map(float, a)) for a in curve.getData())
        assert all(math.isfinite(y) for y in ys), (curve.name(), ys)
        assert min(xs) == pytest.approx(-(2 * STEP_AT - 1) * TICK_S) and max(xs) == pytest.approx(0.0)
        assert max(b - a for a, b in zip(xs[:-1], xs[1:], strict=True)) == pytest.approx(TICK_S), curve.name()   # no jump drawn
    if step_s < 0:
        assert w.grab().save(str(artifacts / "wall-clock-step.png"))


def test_a_feed_without_mono_is_plotted_on_its_wall_clock():
    """An older server's feed: its wall clock is the time base, as before (a step back starts the plots afresh)."""
    snaps = _snapshots(0.0, with_mono=False)
    v = _fed(snaps).view()
    assert v.plot_now is not None and v.x_now == v.now == snaps[-1]["time"]
    assert v.history_start == snaps[0]["time"]
    v = _fed(_snapshots(-3600.0, with_mono=False)).view()
    assert all(len(p) == STEP_AT for p in v.decode_history.values())


def test_a_mono_of_the_wrong_type_is_named():
    from strata.monitor.model import FeedError

    snap = _snapshots(0.0)[0]
    snap["mono"] = "12"
    with pytest.raises(FeedError, match="'mono' must be a number, got '12'"):
        MonitorModel().apply(snap)


def test_the_server_sends_its_monotonic_clock(tiny_model_factory, tmp_path):
    served = start_serve(str(tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)), tmp_path)
    try:
        before = time.monotonic()
        first = httpx.get(served.url + "/v1/monitor", timeout=30).json()
        second = httpx.get(served.url + "/v1/monitor", timeout=30).json()
        after = time.monotonic()
        # one machine: the server's monotonic clock is this process's
        assert before <= first["mono"] <= second["mono"] <= after, (before, first["mono"], second["mono"], after)
        assert isinstance(first["time"], float)
    finally:
        stop_serve(served)


@pytest.mark.parametrize("restart_mono", [100.0, 5000.0 + 2 * STEP_AT * TICK_S + 30.0], ids=["back", "goes-on"])
def test_a_new_server_starts_the_plots_afresh_whatever_its_mono(restart_mono):
    """Another machine's server behind the address (its `mono` goes back) or a restart on this one (the machine's
    `mono` goes on, the counters start again): never points drawn after "now" nor the old server's curves kept."""
    before = _snapshots(0.0)[:STEP_AT]
    after = []
    for k, s in enumerate(_snapshots(0.0)[:STEP_AT]):
        s["mono"] = restart_mono + k * TICK_S
        s["totals"] = {**s.get("totals", {}), "requests": 0, "generated_tokens": 0, "prompt_tokens": 0}
        after.append(s)
    assert before[-1]["totals"]["requests"] > 0
    m = _fed(before)
    m.set_connection("disconnected", "the server closed the feed")
    m.set_connection("connected", "http://127.0.0.1:8080")
    for s in after:
        m.apply(s)
    v = m.view()
    assert v.history_start == restart_mono and v.gaps == ()
    for points in v.decode_history.values():
        assert [t for t, _ in points] == [s["mono"] for s in after]
