"""With more contexts than colours (8) each context's curves are still told from every other's. Session 40's trial,
`strata serve --batch 16` under 16 openai-SDK clients: the slots panel's colours repeat after 8, so main, slot 8 and
slot 16 drew the same line in both speed plots and had the same name colour in the table (the key there, the
legends being hidden for 17 entries): three curves of 17 no one could tell apart (--batch 8 alike: main and slot 8).
Now the second 8 are dashed, the third dotted, and each name in the table has a sample of its line. Real Qt
(offscreen), the recorded feed of a real server with its slot copied to 16."""

from __future__ import annotations

import copy
import json

import pytest
from PySide6.QtCore import Qt
from strata.monitor.model import MonitorModel

from tests.fixtures.qt import settle, shown_window
from tests.monitor.recorded import DATA


def contexts(n_slots: int) -> MonitorModel:
    m = MonitorModel()
    for snap in json.loads((DATA / "series.json").read_text(encoding="utf-8")):
        base = snap["slots"][1]
        snap["slots"] = [snap["slots"][0]] + [dict(copy.deepcopy(base), id=i) for i in range(1, n_slots + 1)]
        m.apply(snap)
    m.set_connection("connected", "http://127.0.0.1:8080")
    return m


def pens(plot) -> dict[str, tuple[str, Qt.PenStyle]]:
    return {c.name(): (c.opts["pen"].color().name(), c.opts["pen"].style()) for c in plot.getPlotItem().listDataItems()}


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_seventeen_contexts_draw_seventeen_different_lines(qtbot, theme, artifacts):
    w = shown_window(qtbot, contexts(16), (1280, 800), theme=theme)
    w.redraw(force=True)
    settle(qtbot, w)
    for plot in (w.slots.prefill_plot, w.slots.decode_plot):
        looks = pens(plot)
        assert len(looks) == 17
        assert len(set(looks.values())) == 17, sorted(looks.items(), key=lambda kv: kv[1])   # before: 8 looks
    looks = pens(w.slots.decode_plot)
    table = w.slots.table
    images = {}
    for r in range(table.rowCount()):
        item = table.item(r, 0)
        name = item.text()
        assert item.foreground().color().name() == looks[name][0]     # the name still in its curves' colour
        icon = item.icon()
        assert not icon.isNull(), name                                  # and a sample of its line beside it
        images[name] = icon.pixmap(22, 10).toImage()
    assert images["main"] != images["slot 8"] != images["slot 16"] != images["main"]
    assert w.grab().save(str(artifacts / f"seventeen-contexts-{theme}.png"))


def test_eight_contexts_or_fewer_keep_solid_lines_and_no_samples(qtbot):
    w = shown_window(qtbot, contexts(7), (1280, 800))
    looks = pens(w.slots.decode_plot)
    assert len(looks) == 8 and {style for _, style in looks.values()} == {Qt.PenStyle.SolidLine}
    assert all(w.slots.table.item(r, 0).icon().isNull() for r in range(w.slots.table.rowCount()))


def test_forty_contexts_draw_forty_different_lines(qtbot):
    """Review of b150ea9: solid, dashed, dotted and then solid again, so from 25 contexts (`--batch 24`; it goes to
    256) main and slot 24 drew the same line once more. Five line styles: 40 looks before any repeats."""
    w = shown_window(qtbot, contexts(39), (1280, 800))
    looks = pens(w.slots.decode_plot)
    assert len(looks) == 40
    assert len(set(looks.values())) == 40, sorted(looks.items())
