"""`strata monitor`: the live monitor window on a running server (this machine's or another's).

`--screenshot PATH [--after S]` renders the window after S seconds of live feed, saves a PNG and
exits (offscreen works: QT_QPA_PLATFORM=offscreen), for docs, tests and bug reports.
Not here: the window (window.py) or the feed (client.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from strata.monitor.client import READ_TIMEOUT_S, normalize_url

DEFAULT_URL = "http://127.0.0.1:8080"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("STRATA_URL", DEFAULT_URL),
                        help=f"the server's address (default: $STRATA_URL or {DEFAULT_URL})")
    parser.add_argument("--api-key", default=os.environ.get("STRATA_API_KEY"), metavar="KEY",
                        help="the server's API key, when it requires one (default: $STRATA_API_KEY)")
    parser.add_argument("--theme", choices=("system", "light", "dark"), default="system",
                        help="colours (default: follow the system's light/dark setting)")
    parser.add_argument("--screenshot", metavar="PATH", default=None,
                        help="save the window as a PNG after --after seconds, then exit")
    parser.add_argument("--after", metavar="SECONDS", type=float, default=3.0,
                        help="seconds of live feed before the screenshot (default 3)")
    parser.add_argument("--size", metavar="WxH", default="1280x800", help="window size (default 1280x800)")


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"strata monitor: --size must be WIDTHxHEIGHT (e.g. 1280x800), got {text!r}") from None
    if not (320 <= w <= 10000 and 240 <= h <= 10000):
        raise ValueError(f"strata monitor: --size {text!r} is out of range (320x240 to 10000x10000)")
    return w, h


def url_given(text: str) -> str:
    """normalize_url's, its refusal naming where the address came from: `STRATA_URL=ftp://x strata monitor`
    answered 'monitor: 'ftp://x' is not an http(s) address', a flag the user never typed nor a variable named."""
    try:
        return normalize_url(text)
    except ValueError as e:
        where = "STRATA_URL" if text == os.environ.get("STRATA_URL") else "--url"
        said = str(e).removeprefix("monitor: ").replace("--url is empty", "empty", 1)
        raise ValueError(f"strata monitor: {where}: {said}") from None


FIRST_ANSWER_WAIT_S = READ_TIMEOUT_S   # past --after, the most a shot waits for the feed's first answer


def check_after(after: float) -> float:
    if not (0 <= after <= 3600):
        raise ValueError(f"strata monitor: --after must be between 0 and 3600 seconds, got {after!r}")
    return after


def run(args: argparse.Namespace) -> int:
    try:
        url = url_given(args.url)
        after = check_after(args.after)
        size = parse_size(args.size)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication
    from strata.monitor.client import FeedClient
    from strata.monitor.gui_thread_gc import GuiThreadCollector
    from strata.monitor.model import MonitorModel
    from strata.monitor.qt_notes import quiet_offscreen_notes
    from strata.monitor.window import MonitorWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Strata monitor")
    quiet_offscreen_notes(app)
    collector = GuiThreadCollector(app)    # the feed's thread allocates too: Qt objects are freed on this one only
    model = MonitorModel()
    client = FeedClient(url, model, api_key=args.api_key).start()
    window = MonitorWindow(model, theme=args.theme, title=f"Strata monitor \u2014 {url}")
    window.resize(*size)
    window.show()
    status = {"code": 0}
    if args.screenshot:
        first_answer_by = time.monotonic() + after + FIRST_ANSWER_WAIT_S

        def shoot() -> None:
            # a loaded machine can take longer than --after for the first answer: a picture of "connecting"
            # would say nothing, so wait for the answer (or the refusal), as long as a read may take
            if model.view().connection == "connecting" and time.monotonic() < first_answer_by:
                QTimer.singleShot(100, shoot)
                return
            try:
                path = window.save_png(args.screenshot)
                view = model.view()
                drawn = (window.width(), window.height())
                # below the window's least size Qt draws it larger: say so rather than leave a surprise
                at = "" if drawn == size else f" at {drawn[0]}x{drawn[1]}, the window's least size for --size {args.size}"
                print(f"strata monitor: saved {path}{at} ({view.connection}"
                      f"{', ' + view.connection_detail if view.connection != 'connected' else ''})")
                status["code"] = 0 if view.connection == "connected" else 1
            except OSError as e:
                print(f"strata monitor: {e}", file=sys.stderr)
                status["code"] = 1
            app.quit()
        QTimer.singleShot(int(after * 1000), shoot)
    try:
        app.exec()
    finally:
        client.stop()
        collector.stop()
    return status["code"]
