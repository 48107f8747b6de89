"""CPU cost of the open monitor window: feeds snapshots to a 1280x800 window offscreen, one per 0.25 s of a
simulated clock, runs the window's redraw timer tick after each (which redraws when `redraw_policy` says so)
and lets Qt paint, then prints the process CPU time per snapshot and per second of feed.

--feed recorded: the recorded snapshots (tests/data/monitor/series.json, times moved 0.25 s apart), cycled.
--feed busy: a busy server made from them: two slots generating, a request finishing every second (the
requests table's rows shift down), the plots scrolling, the log growing.
--feed idle: an idle server from the last of them: every slot idle, no request, only the plots' time and the
memory figures moving (a window left open all day beside a server nobody is using).

--contexts N: every snapshot holds N contexts (main and slots 1..N-1, copies of slot 1 with their speeds shifted so
the curves differ), as `strata serve --batch N-1` shows them; more than 8 draw dashed and dotted lines (b150ea9).

Run: QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/monitor_redraw.py [--snapshots 200] [--feed busy|idle]
[--contexts 17]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "monitor" / "series.json"
FEED_INTERVAL_S = 0.25


def recorded_feed(series: list[dict], n: int) -> list[dict]:
    t0 = series[0]["time"]
    snaps = []
    for i in range(n):
        s = copy.deepcopy(series[i % len(series)])
        s["time"] = t0 + i * FEED_INTERVAL_S
        snaps.append(s)
    return snaps


def busy_feed(series: list[dict], n: int) -> list[dict]:
    """A server generating all along: slots 1 and 2 decoding at varying speeds, main reading prompts, a request
    finishing each second, RAM going up and down."""
    base = series[-1]
    t0 = base["time"]
    requests = copy.deepcopy(base["requests"])
    next_id = max(r["id"] for r in requests) + 1
    log = list(base["log_tail"])
    snaps = []
    for i in range(n):
        s = copy.deepcopy(base)
        now = t0 + i * FEED_INTERVAL_S
        s["time"] = now
        for k, slot in enumerate(s["slots"]):
            slot["state"] = ("prefill", "decode", "decode")[k % 3]
            slot["tokens"] = min(slot["capacity"], slot["tokens"] + 16 * i)
            slot["decode_tps"] = round(300 + 80 * math.sin(i / 5 + k), 1)
            slot["prefill_tps"] = round(3000 + 900 * math.cos(i / 7 + k), 1)
            slot["last_use"] = now
        if i % 4 == 0:          # a request finished: it goes on top, the oldest leaves
            r = copy.deepcopy(requests[-1])
            r.update(id=next_id, started=now - 1.5, finished=now - 0.01, output_tokens=64 + i % 50,
                     decode_tps=round(280 + i % 40, 1), ttft_ms=round(50 + i % 30, 1))
            next_id += 1
            requests = [*requests[1:], r]
            log = [*log[1:], f"INFO request {next_id - 1} done: {r['output_tokens']} tokens"]
        s["requests"] = copy.deepcopy(requests)
        s["log_tail"] = list(log)
        s["totals"].update(in_flight=2, requests=next_id - 1, generated_tokens=base["totals"]["generated_tokens"] + 150 * i)
        s["cache"]["admission"]["available_mib"] = 20000 + 400 * math.sin(i / 9)
        snaps.append(s)
    return snaps


def idle_feed(series: list[dict], n: int) -> list[dict]:
    """Nothing running: the last recorded snapshot, its slots idle, with only time and memory moving."""
    base = series[-1]
    snaps = []
    for i in range(n):
        s = copy.deepcopy(base)
        s["time"] = base["time"] + i * FEED_INTERVAL_S
        for slot in s["slots"]:
            slot["state"] = "idle"
        s["totals"]["in_flight"] = 0
        s["cache"]["admission"]["available_mib"] = 20000 + 40 * math.sin(i / 9)
        snaps.append(s)
    return snaps


FEEDS = {"recorded": recorded_feed, "busy": busy_feed, "idle": idle_feed}


def with_contexts(snaps: list[dict], n: int) -> list[dict]:
    """Each snapshot's slots made `n`: main kept, slots 1..n-1 copies of the first slot after it (its state kept),
    each with its speeds shifted by its number so no two curves lie on each other."""
    if n < 2:
        raise SystemExit(f"--contexts must be 2 or more (main and a slot), got {n}")
    for s in snaps:
        main, base = s["slots"][0], s["slots"][1]
        slots = [main]
        for i in range(1, n):
            slot = copy.deepcopy(s["slots"][i] if i < len(s["slots"]) else base)
            slot["id"] = i
            for key in ("decode_tps", "prefill_tps"):
                if isinstance(slot.get(key), (int, float)):
                    slot[key] = round(slot[key] * (1 + 0.04 * i), 1)
            slots.append(slot)
        s["slots"] = slots
    return snaps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshots", type=int, default=200)
    ap.add_argument("--theme", choices=("light", "dark"), default="light")
    ap.add_argument("--feed", choices=tuple(FEEDS), default="recorded")
    ap.add_argument("--contexts", type=int, default=None, help="contexts in each snapshot (default: the feed's own)")
    args = ap.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication
    from strata.monitor.model import MonitorModel
    from strata.monitor.window import MonitorWindow

    app = QApplication([])
    series = json.loads(DATA.read_text(encoding="utf-8"))
    model = MonitorModel()
    window = MonitorWindow(model, theme=args.theme)
    window.timer.stop()                          # this loop ticks it, on the simulated clock
    window.resize(1280, 800)
    window.show()
    app.processEvents()
    snaps = FEEDS[args.feed](series, args.snapshots)
    if args.contexts is not None:
        snaps = with_contexts(snaps, args.contexts)
    clock = [0.0]
    window.clock = lambda: clock[0]
    tick = getattr(window, "tick", window.redraw)   # before redraw_policy the timer called redraw itself
    drawn = 0
    c0, w0 = time.process_time(), time.perf_counter()
    for i, s in enumerate(snaps):
        clock[0] = i * FEED_INTERVAL_S
        model.apply(s)
        version = window._drawn_version
        tick()
        drawn += window._drawn_version != version
        app.processEvents()
    cpu_s = time.process_time() - c0
    cpu_ms = cpu_s / len(snaps) * 1000
    wall_ms = (time.perf_counter() - w0) / len(snaps) * 1000
    per_s = cpu_s / (len(snaps) * FEED_INTERVAL_S) * 1000
    contexts = len(snaps[0]["slots"])
    print(f"{args.feed} feed, {contexts} contexts, {len(snaps)} snapshots, {drawn} redrawn: {cpu_ms:.1f} ms CPU and {wall_ms:.1f} ms wall "
          f"per snapshot, {per_s:.0f} ms CPU per second of feed (~{per_s / 10:.0f} % of one core); "
          f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
