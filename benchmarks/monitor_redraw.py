"""CPU cost of one monitor redraw: feeds the recorded snapshots (tests/data/monitor/series.json, with
their times moved 0.25 s apart) to a 1280x800 window offscreen, redraws and lets Qt paint after each,
and prints the process CPU time per snapshot. The window redraws at most 4 times a second while it
is visible, so the share of one core is about 4 x this.

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/monitor_redraw.py [--snapshots 200]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "monitor" / "series.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshots", type=int, default=200)
    ap.add_argument("--theme", choices=("light", "dark"), default="light")
    args = ap.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication
    from strata.monitor.model import MonitorModel
    from strata.monitor.window import MonitorWindow

    app = QApplication([])
    series = json.loads(DATA.read_text(encoding="utf-8"))
    model = MonitorModel()
    window = MonitorWindow(model, theme=args.theme)
    window.resize(1280, 800)
    window.show()
    app.processEvents()
    t0 = series[0]["time"]
    snaps = []
    for i in range(args.snapshots):
        s = copy.deepcopy(series[i % len(series)])
        s["time"] = t0 + i * 0.25
        snaps.append(s)
    c0, w0 = time.process_time(), time.perf_counter()
    for s in snaps:
        model.apply(s)
        window.redraw()
        app.processEvents()
    cpu_ms = (time.process_time() - c0) / len(snaps) * 1000
    wall_ms = (time.perf_counter() - w0) / len(snaps) * 1000
    print(f"{len(snaps)} snapshots: {cpu_ms:.1f} ms CPU and {wall_ms:.1f} ms wall per snapshot "
          f"(~{4 * cpu_ms / 10:.0f} % of one core at 4 snapshots a second); load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
