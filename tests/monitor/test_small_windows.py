"""The monitor at a small screen's sizes: the plots' legends stay inside their plots (with the default four
slots the speed plots' legends ran past the plot's bottom: "slot 3" cut in half, "slot 4" gone, the parks
plot's "discarded" cut; a new-user trial's screenshot at 1024x640), and a long model line wraps instead
of widening the window past the screen."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel
from strata.monitor.model import MonitorModel
from strata.monitor.window import MonitorWindow

from tests.fixtures.qt import settle, shown_window

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


@pytest.mark.parametrize("size", [(1280, 800), (1024, 640), (800, 660), (800, 600), (960, 540)])
def test_every_legend_entry_is_inside_its_plot(qtbot, size):
    w = shown_window(qtbot, five_contexts(), size)
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


@pytest.mark.parametrize("size", [(800, 600), (960, 540), (1024, 640)])
def test_a_window_shorter_than_the_panels_scrolls_them_whole(qtbot, size):
    """960x540 is a 1920x1080 laptop at 200 % (logical pixels). The window's least height (660) counted none of
    the lines the header and the cache panel wrap to at such widths (at 312 px the cache panel needs 657 px): the
    window could not be as short as the screen, and the cache panel was squeezed, its hit counts and labels cut
    to 10 of their 14 px, the parks plot overrunning its box. Now the panels keep the height they need and scroll."""
    w = shown_window(qtbot, five_contexts(), size)
    assert (w.width(), w.height()) == size, w.minimumSizeHint()
    cut = [(lab.text()[:30], lab.height(), lab.minimumSizeHint().height()) for lab in w.findChildren(QLabel)
           if lab.isVisible() and lab.height() < lab.minimumSizeHint().height()]
    assert cut == []
    for plot in (w.slots.prefill_plot, w.slots.decode_plot, w.cache.parks_plot, w.cache.ram_plot):
        item = plot.getPlotItem()
        assert plot.parentWidget().rect().contains(plot.geometry()), item.titleLabel.text
        # the plot's title and axes fit the widget: its right part was cut off (the parks plot's title, its 'disk'
        # legend entry and last tick at 800 px: 222 px drawn in 158)
        assert plot.toolTip(), item.titleLabel.text                # the short title's rest: what the lines are
        assert item.minimumWidth() <= plot.viewport().width() and \
            item.sceneBoundingRect().right() <= plot.viewport().width() + 0.5, (item.titleLabel.text, plot.width())
    bar = w.panels.verticalScrollBar()
    assert bar.isVisible() and bar.maximum() == w.panels.widget().height() - w.panels.viewport().height() > 0


def test_a_long_model_line_does_not_widen_the_window_past_a_small_screen(qtbot):
    """A real model's header line (SmolLM2's 'Smollm2 135M 8k Lc100K Mix1 Ep2' description, experts, the
    CPU backend's name) did not wrap: the window could not be narrower than that line, 1,091 px for the
    default model (a new-user trial asked for 1024x640 and got 1091x660), wider than a 1024-px screen."""
    m = five_contexts()
    snap = copy.deepcopy(m.view().snapshot)
    snap["model"].update(name="Qwen3-Coder-30B-A3B-Instruct-UD-Q4_K_XL", quant="Q4_K",
                         description="Qwen3 Coder 30B A3B Instruct Unsloth Dynamic 2.0", arch="qwen3moe",
                         n_ctx_train=262144, n_expert=128, n_expert_used=8)
    m.apply(snap)
    w = shown_window(qtbot, m, (800, 660))
    assert w.width() == 800 and w.minimumSizeHint().width() <= 800, w.minimumSizeHint()
    assert w.header.model.isVisible() and "Qwen3 Coder 30B" in w.header.model.text()


def test_a_long_disconnection_reason_wraps_instead_of_widening_the_window(qtbot):
    """The reason the feed is down (a refused connection names the address and what to do) sat on one line:
    after the app's server was killed the header needed 1,366 px and the 1280-px window grew to 1,378 px,
    wider than a 1366x768 screen, and stayed so."""
    m = five_contexts()
    w = MonitorWindow(m, theme="light")
    qtbot.addWidget(w)
    w.resize(1280, 800)
    w.show()
    qtbot.waitExposed(w)
    m.set_connection("disconnected", "cannot reach http://127.0.0.1:8080: [Errno 111] Connection refused (no server "
                     "listens there: start one with `strata serve` or ./run, or give --url)")
    w.redraw()
    settle(qtbot, w)
    assert w.width() == 1280 and w.minimumSizeHint().width() <= 1024, w.minimumSizeHint()
    state = w.header.state
    assert "give --url" in state.text()
    assert state.minimumSizeHint().width() <= state.width() and state.height() >= state.heightForWidth(state.width())


def window_frame_on_a_screen(tmp_path, width: int, height: int, code: str) -> tuple[int, int, int, int]:
    """The frame of the window `code` shows (its last line prints `app` and `w`'s rectangles) on an offscreen
    screen of that size. A subprocess: the offscreen platform's screen size is set when the application starts."""
    screen = {"synchronousWindowSystemEvents": True, "windowFrameMargins": False,
              "screens": [{"name": "laptop", "x": 0, "y": 0, "width": width, "height": height,
                           "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}
    config = tmp_path / "screen.json"
    config.write_text(json.dumps(screen), encoding="utf-8")
    code = ("from PySide6.QtWidgets import QApplication; app = QApplication([]); " + code + "; w.show(); "
            "app.processEvents(); print(app.primaryScreen().availableGeometry().getRect(), w.frameGeometry().getRect())")
    env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={config}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         check=True).stdout.strip().splitlines()[-1]
    screen_rect, frame = (tuple(int(x) for x in part.strip("() ").split(",")) for part in out.split(") ("))
    assert screen_rect == (0, 0, width, height)
    return frame


MONITOR = ("from strata.monitor.model import MonitorModel; from strata.monitor.window import MonitorWindow; "
           "w = MonitorWindow(MonitorModel())")


def test_the_window_opens_inside_a_1366x768_screen(tmp_path):
    """The window opened at 1280x800 whatever the screen: on a 1366x768 laptop (the commonest small screen)
    its bottom, the status bar where the app says why its server is down, was below the screen's edge."""
    x, y, w, h = frame = window_frame_on_a_screen(tmp_path, 1366, 768, MONITOR)
    assert x >= 0 and y >= 0 and x + w <= 1366 and y + h <= 768 - 30, frame   # room for a title bar too
    assert (w, h) == (1280, 728), frame      # as wide as before, and as tall as the screen lets it


def test_the_window_opens_inside_a_200_percent_laptop_screen(tmp_path):
    """1920x1080 at 200 % is 960x540 logical pixels: the window's least height, 660, was taller than that."""
    x, y, w, h = frame = window_frame_on_a_screen(tmp_path, 960, 540, MONITOR)
    assert x >= 0 and y >= 0 and x + w <= 960 and y + h <= 540 - 30, frame


def test_a_failed_load_reason_with_angle_brackets_is_shown_as_text(qtbot):
    """A load error quoting the file ('<unk>', a path with '<') was put into the header's rich text unescaped:
    Qt took it for a tag and dropped it (the disconnection reason was escaped, this one not)."""
    m = MonitorModel()
    snap = json.loads((DATA / "series.json").read_text(encoding="utf-8"))[0]
    m.apply({**snap, "time": snap["time"] + 1, "ready": False,
             "error": "the model could not be loaded: token <unk> has no id"})
    m.set_connection("connected", "http://127.0.0.1:8080")
    w = MonitorWindow(m, theme="light")
    qtbot.addWidget(w)
    w.redraw()
    assert "failed: the model could not be loaded: token &lt;unk&gt; has no id" in w.header.state.text()
