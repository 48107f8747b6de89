"""The plots' legends stay inside their plots: with the default four slots (five contexts) the speed
plots' legends ran past the bottom of the plot at the window's smaller sizes ("slot 3" cut in half,
"slot 4" gone), and the parks plot's "discarded" was cut the same way (a new-user trial's screenshot at
1024x640). A legend too tall for its plot spreads into more columns."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from strata.monitor.model import MonitorModel
from strata.monitor.window import MonitorWindow

DATA = Path(__file__).resolve().parents[1] / "data" / "monitor"


def five_contexts() -> MonitorModel:
    """The recorded feed with two more slots, as `strata serve`'s default --batch 4 gives."""
    m = MonitorModel()
    for snap in json.loads((DATA / "series.json").read_text(encoding="utf-8")):
        for n in (3, 4):
            extra = copy.deepcopy(snap["slots"][1])
            extra["id"] = n
            snap["slots"].append(extra)
        m.apply(snap)
    m.set_connection("connected", "http://127.0.0.1:8080")
    return m


@pytest.mark.parametrize("size", [(1280, 800), (1024, 640), (800, 660)])
def test_every_legend_entry_is_inside_its_plot(qtbot, size):
    w = MonitorWindow(five_contexts(), theme="light")
    qtbot.addWidget(w)
    w.resize(*size)
    w.show()
    qtbot.waitExposed(w)
    w.redraw()
    qtbot.wait(50)
    plots = {"prefill": w.slots.prefill_plot, "decode": w.slots.decode_plot, "parks": w.cache.parks_plot}
    for name, plot in plots.items():
        item = plot.getPlotItem()
        legend = item.legend
        entries = [label.text for _, label in legend.items]
        assert len(entries) == (5 if name != "parks" else 3), (name, entries)
        box = item.getViewBox().sceneBoundingRect()
        for sample, label in legend.items:
            for part in (sample, label):
                r = part.sceneBoundingRect()
                assert box.contains(r), (name, label.text, r, box, size)
