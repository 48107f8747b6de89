"""A monitor model fed the snapshots a real server's feed gave (tests/data/monitor/series.json), with a last one of
the test's own (shown with tests.fixtures.qt.shown_window): for the tests of what one field or state looks like."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

from strata.monitor.model import MonitorModel

DATA = Path(__file__).resolve().parents[1] / "data" / "monitor"


def recorded_model(edit: Callable[[dict], None]) -> MonitorModel:
    """The recorded series applied, then a copy of its last snapshot 0.25 s later as `edit` changes it; the feed
    connected."""
    series = json.loads((DATA / "series.json").read_text(encoding="utf-8"))
    model = MonitorModel()
    for snap in series:
        model.apply(snap)
    last = copy.deepcopy(series[-1])
    last["time"] += 0.25
    edit(last)
    model.apply(last)
    model.set_connection("connected", "http://127.0.0.1:8080")
    return model
