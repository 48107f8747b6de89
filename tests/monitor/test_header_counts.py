"""The header's counts take their noun's singular for one: `1 thread`, `1 request`. A new-user trial's app, on the
server with `--threads 1` it proposes for a small machine, said `cpu-avx512-vnni, 1 threads`, and after its first
request `1 requests`."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from strata.monitor import units
from strata.monitor.model import MonitorModel
from strata.monitor.window import MonitorWindow

DATA = Path(__file__).resolve().parents[1] / "data" / "monitor"


@pytest.mark.parametrize(("threads", "requests", "said"), [(1, 1, ("1 thread", "1 request ")),
                                                          (2, 24, ("2 threads", "24 requests "))])
def test_one_thread_and_one_request_are_singular(qtbot, threads, requests, said):
    series = json.loads((DATA / "series.json").read_text(encoding="utf-8"))
    model = MonitorModel()
    for snap in series[:-1]:
        model.apply(snap)
    last = copy.deepcopy(series[-1])
    last["engine"]["threads"], last["totals"]["requests"] = threads, requests   # a server's feed as it was
    model.apply(last)
    model.set_connection("connected", "http://127.0.0.1:8080")
    window = MonitorWindow(model, theme="light")
    qtbot.addWidget(window)
    window.show()
    window.redraw()
    engine, totals = said
    assert f"cpu-avx512-vnni, {engine} \u2022" in window.header.model.text()
    assert window.header.totals.text().startswith(f"{totals}done, ")


def test_counted():
    assert [units.counted(n, "request") for n in (0, 1, 2, 1234, None)] == [
        "0 requests", "1 request", "2 requests", "1,234 requests", "\u2013 requests"]
