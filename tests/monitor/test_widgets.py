"""The monitor window drawn offscreen (pytest-qt) from feed snapshots recorded from a real server:
what each panel shows, units on the numbers, cells updated in place (no flicker), both themes."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from strata.monitor.model import HIT_LEVELS, MonitorModel
from strata.monitor.widgets.cache import LEVEL_HEADERS
from strata.monitor.widgets.requests import REQUEST_HEADERS
from strata.monitor.widgets.slots import HEADERS as SLOT_HEADERS
from strata.monitor.window import MonitorWindow

from tests.fixtures.qt import shown_window

DATA = Path(__file__).resolve().parents[1] / "data" / "monitor"


def load(name):
    return json.loads((DATA / name).read_text(encoding="utf-8"))


@pytest.fixture
def model():
    m = MonitorModel()
    for s in load("series.json"):
        m.apply(s)
    m.set_connection("connected", "http://127.0.0.1:8080")
    return m


@pytest.fixture
def window(qtbot, model):
    return shown_window(qtbot, model)


def column(table, headers, name):
    c = headers.index(name)
    return [table.item(r, c).text() for r in range(table.rowCount())]


def test_slots_table(window, model):
    snap = model.view().snapshot
    table = window.slots.table
    assert table.rowCount() == len(snap["slots"])
    assert column(table, SLOT_HEADERS, "context") == ["main", "slot 1", "slot 2"]
    held = column(table, SLOT_HEADERS, "held\ntok (filled)")
    assert held == [f"{s['tokens']:,} ({100 * s['tokens'] / s['capacity']:.0f} %)" for s in snap["slots"]]
    speeds = column(table, SLOT_HEADERS, "prefill\ntok/s") + column(table, SLOT_HEADERS, "decode\ntok/s")
    assert all(t == "\u2013" or t.replace(",", "").replace(".", "").rstrip("k").isdigit() for t in speeds)
    assert table.isColumnHidden(SLOT_HEADERS.index("group"))          # one group: no column for it


def test_speed_plots_have_a_curve_per_context(window):
    names = {c.name() for c in window.slots.prefill_plot.getPlotItem().listDataItems()}
    assert names == {"main", "slot 1", "slot 2"}
    axis = window.slots.decode_plot.getPlotItem().getAxis("left")
    assert "tok/s" in axis.labelString()


def test_requests_show_reuse_and_where_the_prompt_stopped_matching(window, model):
    snap = model.view().snapshot
    table = window.activity.requests
    assert table.rowCount() == len(snap["requests"])
    newest = snap["requests"][-1]
    assert table.item(0, 0).text().startswith(f"{newest['id']} ")
    reused = column(table, REQUEST_HEADERS, "reused\ntok (share)")
    assert all(t.endswith("%)") for t in reused)
    at = column(table, REQUEST_HEADERS, "mismatch\nat token")
    expected = [f"{r['mismatch_at']:,}" if r.get("mismatch_at") is not None
                and r["mismatch_at"] >= r.get("reused_tokens", 0) else "\u2013" for r in reversed(snap["requests"])]
    assert at == expected
    assert any(t.startswith("time 0") for t in column(table, REQUEST_HEADERS, "text\nthere"))
    assert window.activity.tabText(0) == f"Recent requests ({len(snap['requests'])})"


def test_cache_panel(window, model):
    cache = model.view().cache
    for key in HIT_LEVELS:
        assert window.cache.hit_bars[key].value == cache["hits"][key]
    levels = window.cache.levels
    assert column(levels, LEVEL_HEADERS, "level") == ["ram", "warm", "cold"]
    cold = next(lv for lv in cache["levels"] if lv["name"] == "cold")
    row = column(levels, LEVEL_HEADERS, "level").index("cold")
    assert levels.item(row, LEVEL_HEADERS.index("folder")).text() == cold["folder"]
    assert levels.item(row, LEVEL_HEADERS.index("used /\nbudget")).text().endswith("/ 64.0 MiB")
    assert column(levels, LEVEL_HEADERS, "state")[1] == "off"
    assert "holds" in window.cache.admission.text()
    assert window.cache.decisions.rowCount() == len(cache["admission"]["last"][-50:])
    assert "System-prompt cache" in window.cache.system_prompt.text()
    assert "MiB" in window.cache.system_prompt.text()
    assert "<b>Segments</b>" in window.cache.system_prompt.text()


def test_the_segment_tier_has_its_line():
    from strata.monitor.widgets.cache import prefix_store_text
    on = {"folder": "/c/segments", "budget_mib": 256, "used_mib": 34.2, "entries": 19}
    assert prefix_store_text("Segments", on) == "<b>Segments</b> /c/segments \u2022 34.2 MiB of 256 MiB used \u2022 19 entries"
    assert prefix_store_text("Segments", {"budget_mib": 0}) == "<b>Segments</b> off"


def test_a_floor_that_does_not_hold_is_shown(qtbot, model):
    snap = copy.deepcopy(model.view().snapshot)
    snap["time"] += 1
    snap["cache"]["admission"]["available_mib"] = 1000.0        # below the 2560 MiB parking floor
    model.apply(snap)
    w = MonitorWindow(model, theme="light")
    qtbot.addWidget(w)
    text = w.cache.admission.text()
    assert "parking floor 2.5 GiB" in text and "does not hold" in text
    assert "transient floor 512 MiB" in text and text.count("does not hold") == 1


def test_a_memory_limit_is_named_beside_the_available_ram(qtbot, model):
    """Under a cgroup limit (a container), the available figure is what the limit leaves: the panel says so
    (it read as the host's RAM)."""
    snap = copy.deepcopy(model.view().snapshot)
    snap["time"] += 1
    snap["cache"]["admission"].update(available_mib=300.0, limit_mib=768.0)
    model.apply(snap)
    w = MonitorWindow(model, theme="light")
    qtbot.addWidget(w)
    assert "available <b>300 MiB</b> under a memory limit of 768 MiB" in w.cache.admission.text()
    snap["time"] += 1
    snap["cache"]["admission"]["limit_mib"] = None
    model.apply(snap)
    w.redraw(force=True)
    assert "memory limit" not in w.cache.admission.text()


def test_header(window, model):
    snap = model.view().snapshot
    assert snap["endpoint"] in window.header.endpoint.text()
    assert snap["model"]["name"] in window.header.model.text()
    assert "requests" in window.header.totals.text() and "tok/s" in window.header.totals.text()
    assert window.header.info.text() == snap["info_line"]
    assert "connected" in window.header.state.text()


def test_disconnection_is_shown_with_its_reason(window, model):
    model.set_connection("disconnected", "cannot reach http://127.0.0.1:8080: refused")
    window.redraw()
    assert "disconnected" in window.header.state.text() and "refused" in window.header.state.text()


def test_cells_are_updated_in_place(window, model):
    """A redraw with new data rewrites texts; it does not replace items (which would flicker)."""
    before = window.activity.requests.item(0, 0)
    slot_item = window.slots.table.item(1, 0)
    snap = copy.deepcopy(model.view().snapshot)
    snap["time"] += 0.25
    snap["requests"][-1]["ttft_ms"] = 999.0
    model.apply(snap)
    window.redraw()
    assert window.activity.requests.item(0, 0) is before
    assert window.slots.table.item(1, 0) is slot_item
    assert column(window.activity.requests, REQUEST_HEADERS, "TTFT")[0] == "999 ms"
    version = window._drawn_version
    window.redraw()                              # nothing new: nothing redrawn
    assert window._drawn_version == version


def test_an_empty_model_and_a_server_without_cache(qtbot):
    m = MonitorModel()
    w = MonitorWindow(m, theme="dark")
    qtbot.addWidget(w)
    assert "Waiting" in w.cache.summary.text()
    m.apply({"time": 1.0, "ready": True, "slots": [], "requests": []})
    w.redraw()
    assert "Waiting" in w.cache.summary.text()         # hidden (e.g. in the tray): nothing is drawn
    w.show()
    w.redraw()
    assert "No conversation cache" in w.cache.summary.text()
    assert w.slots.table.rowCount() == 0


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_screenshots_of_recorded_load(qtbot, model, theme, tmp_path):
    w = MonitorWindow(model, theme=theme)
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    art = Path(__file__).resolve().parents[2] / "test-artifacts" / "monitor"
    path = w.save_png(art / f"recorded-{theme}.png")
    data = path.read_bytes()
    assert data[:4] == b"\x89PNG"
    assert int.from_bytes(data[16:20], "big") == 1280


def test_bad_theme_is_named():
    from strata.monitor.widgets.theme import choose

    with pytest.raises(ValueError, match="theme must be one of"):
        choose("purple")


def test_system_theme_follows_the_palette(qapp):
    from strata.monitor.widgets import theme

    before = qapp.palette()
    try:
        theme.apply_palette(theme.DARK)
        assert theme.choose("system") is theme.DARK
        theme.apply_palette(theme.LIGHT)
        assert theme.choose("system") is theme.LIGHT
    finally:
        qapp.setPalette(before)


@pytest.mark.parametrize("snap, words", [
    ({"time": 1.0, "ready": False}, "loading the model"),
    ({"time": 1.0, "ready": False, "error": "cannot load model.gguf: no such file"}, "failed: cannot load model.gguf"),
])
def test_a_server_that_is_not_ready_says_why(qtbot, snap, words):
    m = MonitorModel()
    m.apply(snap)
    m.set_connection("connected", "http://127.0.0.1:8080")
    w = MonitorWindow(m, theme="light")
    qtbot.addWidget(w)
    assert words in w.header.state.text()


def test_mismatch_is_hidden_when_the_request_reused_past_it():
    from strata.monitor.widgets.requests import shown_mismatch

    assert shown_mismatch({"mismatch_at": 7, "reused_tokens": 7}) == 7
    assert shown_mismatch({"mismatch_at": 748, "reused_tokens": 1007}) is None    # a cache restore went further
    assert shown_mismatch({"reused_tokens": 5}) is None


def test_copy_address_puts_the_endpoint_on_the_clipboard(window, model, qapp):
    window.header.copy.click()
    assert qapp.clipboard().text() == model.view().snapshot["endpoint"]


def test_a_refused_connection_shows_the_address_it_tries_and_why(qtbot, keyed_server):
    import time

    from strata.monitor.client import FeedClient

    m = MonitorModel()
    client = FeedClient(keyed_server.url + "/v1", m, api_key="wrong").start()
    try:
        deadline = time.monotonic() + 15
        while m.view().connection != "disconnected" and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        client.stop()
    w = MonitorWindow(m, theme="light")
    qtbot.addWidget(w)
    w.redraw()
    assert m.view().target == keyed_server.url
    assert f"trying <b>{keyed_server.url}</b>" in w.header.endpoint.text()
    state = w.header.state.text()
    assert "disconnected" in state and "HTTP 401" in state and "API key" in state
    assert w.header.copy.isEnabled()


def test_after_a_disconnection_the_address_tried_replaces_the_old_endpoint(window, model):
    model.set_target("http://192.0.2.7:9000")
    model.set_connection("disconnected", "cannot reach http://192.0.2.7:9000: refused")
    window.redraw()
    assert "192.0.2.7:9000" in window.header.endpoint.text()
    model.set_connection("connected", "")
    window.redraw()
    assert model.view().snapshot["endpoint"] in window.header.endpoint.text()


def test_output_tokens_say_how_many_were_confirmed_guesses():
    from strata.monitor.widgets.requests import output_cell

    assert output_cell({"output_tokens": 160, "lookup_drafted": 137, "lookup_taken": 91}) == "160 (91)"
    assert output_cell({"output_tokens": 12, "lookup_drafted": 4, "lookup_taken": 0}) == "12"
    assert output_cell({"output_tokens": 1200}) == output_cell({"output_tokens": 1200, "lookup_taken": None})


def test_every_request_column_shows_at_1280x800(window, model, qtbot):
    """The window is laid out for 1280x800: with lookup decoding's confirmed guesses in the output column
    and a mismatch excerpt, the requests table still shows every column, up to "when" (it scrolled sideways,
    cutting "output tok" and hiding "when"); the excerpt column gives way and elides, its cell's tooltip
    holds the whole text. The bound is Qt's: the right edge of the last section within the viewport."""
    snap = copy.deepcopy(model.view().snapshot)
    for r in snap["requests"]:
        r.update(lookup_drafted=40, lookup_taken=31, output_tokens=150, api="anthropic")
    model.apply(snap)
    window.redraw()
    qtbot.wait(50)                          # the header lays its sections out on the event loop
    table = window.activity.requests
    assert table.rowCount() and table.item(0, REQUEST_HEADERS.index("output\ntok")).text() == "150 (31)"
    assert table.horizontalScrollBar().maximum() == 0
    header = table.horizontalHeader()
    assert header.sectionViewportPosition(len(REQUEST_HEADERS) - 1) + header.sectionSize(len(REQUEST_HEADERS) - 1) \
        <= table.viewport().width()


FLOORS = {  # the floors as served (2.5 GiB / 512 MiB by default), close together, far apart
    "recorded": {},
    "close": {"available_mib": 3000, "min_free_mib": 2560, "park_min_free_mib": 2048},
    "far": {"available_mib": 40000, "min_free_mib": 8192, "park_min_free_mib": 1024},
}


@pytest.mark.parametrize("size", [(1280, 800), (1920, 1080), (2560, 1440), (800, 660)])
@pytest.mark.parametrize("floors", list(FLOORS))
def test_the_floor_labels_clear_the_lines_and_each_other(qtbot, size, floors):
    """The RAM plot's two floor labels, as drawn: neither crosses either floor line nor the other label,
    both inside the part of the plot the window shows, each next to its own line (or above both, marked
    with an arrow, when its line is too close to the other for the text). They ran into each other and
    through the other line (at 1280x800 "transient" sat on the parking line). At the window's minimum
    size (800x660) a label with no clear spot is hidden; the text above names both floors."""
    from PySide6.QtCore import QPointF
    from strata.monitor.label_layout import POINTER

    m = MonitorModel()
    for snap in load("series.json"):
        snap["cache"]["admission"].update(FLOORS[floors])
        m.apply(snap)
    w = shown_window(qtbot, m, size)
    panel = w.cache
    plot = panel.ram_plot
    shown = plot.mapToScene(plot.viewport().rect()).boundingRect()
    area = plot.getPlotItem().getViewBox().sceneBoundingRect().intersected(shown)
    lines = {k: line.mapToScene(QPointF(0, 0)).y() for k, line in panel._floor_lines.items()}
    assert all(line.isVisible() for line in panel._floor_lines.values())
    labels = {k: t.sceneBoundingRect() for k, (t, _) in panel._floor_labels.items() if t.isVisible()}
    if size != (800, 660):
        assert set(labels) == set(lines)
    assert "min_free_mib" in labels
    for key, r in labels.items():
        assert r.width() > 20 and area.contains(r), (key, r, area)
        for y in lines.values():
            assert not (r.top() - 1.5 < y < r.bottom() + 1.5), (key, r, lines)   # clear of the 1.5 px pens
        text = panel._floor_labels[key][0].toPlainText()
        y = lines[key]
        if text.endswith(POINTER):     # above both lines, its own being the lower one
            assert r.bottom() <= min(lines.values()) and y == max(lines.values())
        else:                          # right above or below its own line
            assert y - r.bottom() <= 4 or r.top() - y <= 4, (key, r, y)
    if len(labels) == 2:
        assert not labels["min_free_mib"].intersects(labels["park_min_free_mib"])


def test_a_level_shows_the_files_it_skipped_at_start_up():
    """conversation-cache.md counts skipped files 'in the monitor': the window showed none of them."""
    from strata.monitor.widgets.cache import LEVEL_HEADERS, level_cells
    cold = {"name": "cold", "state": "on", "folder": "/c", "used_mib": 1.0, "budget_mib": 64, "entries": 38,
            "degradations": 0, "evictions": 0, "age_evictions": 0, "skipped": {"damaged": 3, "partial": 1}}
    assert level_cells(cold)[LEVEL_HEADERS.index("entries")] == "38 (4 skipped)"
    assert level_cells({**cold, "skipped": {}})[LEVEL_HEADERS.index("entries")] == "38"
    # of them, Strata's own damaged or orphaned files are removed (strata_cache_removed_files_total): each file
    # said once, left on disk (skipped) or removed
    removed = {**cold, "removed": {"damaged": 2, "orphan_image": 1}}
    assert level_cells(removed)[LEVEL_HEADERS.index("entries")] == "38 (1 skipped, 3 removed)"
    assert level_cells({**cold, "removed": {"damaged": 3, "partial": 1}})[LEVEL_HEADERS.index("entries")] == "38 (4 removed)"
    assert level_cells({**removed, "skipped": {}, "removed": {}})[LEVEL_HEADERS.index("entries")] == "38"
    from strata.monitor.widgets.cache import prefix_store_text
    store = {"folder": "/c/sp", "budget_mib": 16, "used_mib": 0.0, "entries": 0, "skipped": {"damaged": 1},
             "removed": {"damaged": 1}}
    assert prefix_store_text("System-prompt cache", store).endswith("\u2022 0 entries (1 removed)")


def test_a_context_in_use_was_last_used_now():
    """A slot decoding a request read "27 min 37 s ago" (when its previous use ended) in the monitor."""
    from strata.monitor.model import SlotRow
    from strata.monitor.widgets.slots import slot_cells

    def row(state):
        return SlotRow(key="1", group=0, state=state, tokens=186, capacity=8192, conversation="43a1e95d61ef",
                       idle_s=1657.0, reused_tokens=163, prefill_tps=235.0, decode_tps=76.7, protection_left_s=0.0,
                       value=0.0)
    last_use = SLOT_HEADERS.index("last\nuse")
    assert slot_cells(row("decode"))[last_use] == slot_cells(row("prefill"))[last_use] == "now"
    assert slot_cells(row("idle"))[last_use] == "27 min 37 s ago"
