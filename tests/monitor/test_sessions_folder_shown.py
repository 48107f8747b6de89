"""The saved-sessions folder in the monitor's cache panel: its use against its budget (or no limit), what a full
one does, the saves evicted and refused; a feed without it (an older server) draws as before."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from strata.monitor import units
from strata.monitor.model import MonitorModel
from strata.monitor.widgets.cache import sessions_folder_text
from strata.monitor.window import MonitorWindow

DATA = Path(__file__).resolve().parents[1] / "data" / "monitor"


def _model(sessions: dict | None) -> MonitorModel:
    m = MonitorModel()
    for s in json.loads((DATA / "series.json").read_text(encoding="utf-8")):
        m.apply(s)
    if sessions is not None:
        snap = copy.deepcopy(m.view().snapshot)
        snap["time"] += 1
        snap["cache"]["sessions_folder"] = sessions
        m.apply(snap)
    return m


def shown(folder: dict) -> str:
    """The line as read: its figures' no-break spaces (units.phrase) as spaces."""
    return sessions_folder_text(folder).replace(units.NBSP, " ")


def test_the_sessions_folder_has_its_line():
    full = {"folder": "/c/sessions", "budget_mib": 2048, "used_mib": 1900.5, "when_full": "reject", "evictions": 0,
            "refusals": 2, "entries": 7, "skipped": {"damaged": 1}, "removed": {}}
    assert shown(full) == ("<b>Saved sessions</b> /c/sessions \u2022 1.9 GiB of 2.0 GiB used (reject "
                                          "when full) \u2022 7 sessions (1 skipped) \u2022 2 refused")
    unlimited = {"folder": "/c/sessions", "budget_mib": 0, "used_mib": 559.0, "when_full": "reject"}
    assert shown(unlimited) == "<b>Saved sessions</b> /c/sessions \u2022 559 MiB used, no limit"


def test_the_panel_shows_it_and_draws_without_it(qtbot):
    shown = {"folder": "/c/sessions", "budget_mib": 64, "used_mib": 12.5, "when_full": "evict", "evictions": 3,
             "refusals": 0}
    for sessions, said in ((shown, "12.5 MiB of 64.0 MiB used (evict when full) \u2022 3 evicted"), (None, None)):
        w = MonitorWindow(_model(sessions), theme="light")
        qtbot.addWidget(w)
        text = w.cache.system_prompt.text().replace(units.NBSP, " ")
        assert "<b>Segments</b>" in text
        assert (said in text) if said else ("Saved sessions" not in text), text
