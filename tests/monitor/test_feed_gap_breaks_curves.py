"""A curve is not drawn on across a loss of the feed. Session 40's trial stopped a real `strata serve` (SIGSTOP) for
13 s under two clients and let it go on: the feed came back from the same process (its counters went on, so the
history was kept) and the decode plot drew a straight line from each slot's last speed before the loss to its
first after, over 13 s when nothing was known (screenshot: a ramp from 36 tok/s down to 0 across the gap). Real Qt
(offscreen), the recorded feed of a real server, then the same feed 20 s later after a disconnection."""

from __future__ import annotations

import copy
import json
import math

from strata.monitor.model import MonitorModel

from tests.fixtures.qt import settle, shown_window
from tests.monitor.recorded import DATA

GAP_S = 20.0


def _decoding(snap: dict, shift: float) -> dict:
    s = copy.deepcopy(snap)
    s["time"] += shift
    for slot in s["slots"]:
        slot["state"], slot["decode_tps"], slot["prefill_tps"] = "decode", 40.0, 300.0
    return s


def _model_across_a_gap() -> MonitorModel:
    series = json.loads((DATA / "series.json").read_text(encoding="utf-8"))
    m = MonitorModel()
    m.set_connection("connected", "http://127.0.0.1:8080")
    for snap in series:
        m.apply(_decoding(snap, 0.0))
    m.set_connection("disconnected", "cannot reach http://127.0.0.1:8080: [Errno 111] Connection refused")
    m.set_connection("connecting", "http://127.0.0.1:8080")
    m.set_connection("connected", "http://127.0.0.1:8080")
    for k in range(8):           # the same process: its counters as they were, or more
        m.apply(_decoding(series[-1], GAP_S + 0.25 * k))
    return m


def _spans(curve) -> list[tuple[float, float]]:
    """The x extents of the segments the curve draws: between two neighbouring finite points."""
    xs, ys = curve.getData()
    return [(float(xs[i]), float(xs[i + 1])) for i in range(len(xs) - 1)
            if all(math.isfinite(float(v)) for v in (ys[i], ys[i + 1], xs[i], xs[i + 1]))]


def test_no_curve_is_drawn_across_the_time_the_feed_was_lost(qtbot, artifacts):
    m = _model_across_a_gap()
    w = shown_window(qtbot, m, (1280, 800))
    w.redraw(force=True)
    settle(qtbot, w)
    curves = {f"{name} {c.name()}": c for name, plot in (("prefill", w.slots.prefill_plot),
                                                         ("decode", w.slots.decode_plot))
              for c in plot.getPlotItem().listDataItems()}
    curves.update({f"parks {c.name()}": c for c in w.cache.parks_plot.getPlotItem().listDataItems()})
    curves["available RAM"] = w.cache._ram_curve
    assert len(curves) == 3 + 3 + 3 + 1
    for name, curve in curves.items():
        xs, _ = curve.getData()
        assert xs is not None and min(xs) < -GAP_S and max(xs) > -1, (name, xs)    # both sides drawn
        long = [s for s in _spans(curve) if s[1] - s[0] > GAP_S / 2]
        assert not long, (name, long)                  # before: one segment from before the loss to after it
    assert w.grab().save(str(artifacts / "feed-gap.png"))


def test_a_restarted_feed_without_a_loss_draws_on():
    """Only a loss breaks a curve: one feed's snapshots are joined however long apart (an interval of 60 s)."""
    series = json.loads((DATA / "series.json").read_text(encoding="utf-8"))
    m = MonitorModel()
    m.set_connection("connected", "x")
    for snap in series:
        m.apply(_decoding(snap, 0.0))
    assert m.view().gaps == ()
    m.set_connection("disconnected", "lost")
    m.set_connection("disconnected", "lost again")      # one loss, however many retries say so
    assert m.view().gaps == (series[-1]["time"],)
