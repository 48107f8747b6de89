"""Where a server's stop (SIGTERM) spends its time with conversations held and a request running: a real
`strata serve` (the default model unless --model), a few agents' conversations answered into its slots, then one
long prompt sent and the stop signalled while it is read (--during prefill) or while it streams its answer
(--during decode). The server runs under a wrapper (this file with --child) that logs when each phase of the stop
begins and ends: aiohttp's shutdown (on_shutdown: the scheduler's stop, the live histories parked), its wait for
the handlers, the cleanup (the cache's close: the writes). Prints each phase's start and length from SIGTERM, and
the whole stop.

    .venv/bin/python benchmarks/stop_phases.py --during prefill --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASE = re.compile(r"^(\S+ \S+) INFO strata\.stop_phases: (begins|ends) (.+?)(?: \((\d+\.\d+) s\))?$")
LINE_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ (\S+): (.*)$")
WORDS = "parser token cache slot engine buffer socket thread queue vector matrix kernel module".split()


def child() -> None:
    """`strata serve` with the stop's phases logged (the wrappers only time; behaviour unchanged)."""
    import asyncio
    import logging

    from aiohttp import web_runner
    from strata.server import app as server_app
    from strata.server import scheduler

    log = logging.getLogger("strata.stop_phases")

    def timed(owner, name: str, label: str) -> None:
        fn = getattr(owner, name)
        if asyncio.iscoroutinefunction(fn):
            async def wrapper(*a, **k):
                t = time.monotonic()
                log.info("begins %s", label)
                try:
                    return await fn(*a, **k)
                finally:
                    log.info("ends %s (%.3f s)", label, time.monotonic() - t)
        else:
            def wrapper(*a, **k):
                t = time.monotonic()
                log.info("begins %s", label)
                prof = None
                if os.environ.get("STOP_PHASES_PROFILE") and label in os.environ["STOP_PHASES_PROFILE"]:
                    import cProfile
                    prof = cProfile.Profile()
                    prof.enable()
                try:
                    return fn(*a, **k)
                finally:
                    log.info("ends %s (%.3f s)", label, time.monotonic() - t)
                    if prof is not None:
                        import io
                        import pstats
                        prof.disable()
                        out = io.StringIO()
                        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
                        print(out.getvalue(), file=sys.stderr)
        setattr(owner, name, wrapper)

    if os.environ.get("STOP_PHASES_ARM") == "wait":   # the stop before Engine.interrupt: the step under way waited for
        scheduler.Scheduler._interrupt_engine = lambda self, on: None
    timed(scheduler.Scheduler, "stop", "scheduler.stop")
    timed(scheduler.Scheduler, "_park_live_histories", "park the live histories")
    timed(server_app, "close_cache", "cache close (writes)")
    timed(web_runner.BaseRunner, "shutdown", "aiohttp shutdown (on_shutdown, handlers)")
    timed(web_runner.BaseRunner, "cleanup", "aiohttp cleanup (all of it)")
    from strata.server import cli as server_cli

    returned = server_cli.end_past_a_stuck_step

    def end(status: int) -> int:
        log.info("serve() returned (asyncio.run ended)")
        return returned(status)
    server_cli.end_past_a_stuck_step = end
    import atexit
    atexit.register(lambda: print(f"{datetime.now():%Y-%m-%d %H:%M:%S},{datetime.now().microsecond // 1000:03d} "
                                  "INFO strata.stop_phases: begins atexit", file=sys.stderr, flush=True))
    from strata.cli import main

    sys.argv = ["strata", "serve", *sys.argv[sys.argv.index("--child") + 1:]]
    sys.exit(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompt(seed: int, n_words: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] + str(i % 97) for i in range(n_words))


def one_run(args: argparse.Namespace, folder: Path, arm: str = "interrupt") -> dict:
    import httpx2 as httpx

    port = free_port()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--no-config", "--port", str(port),
           "--threads", str(args.threads), "--batch", "4", "--ctx", "16384", "--log-level", "info",
           "--conversation-cache-mib", "64", "--conversation-cache-cold-dir", str(folder / "cold"),
           "--conversation-cache-cold-mib", "1024", *args.serve_arg] + (["--model", args.model] if args.model else [])
    log_path = folder / "server.log"
    env = {**os.environ, "HOME": str(folder / "home"), "STOP_PHASES_ARM": arm}
    (folder / "home").mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    t0 = time.time()
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.time() - t0 > 300:
            raise SystemExit(f"the server did not start; see {log_path}")
        time.sleep(0.3)

    def chat(content: str, max_tokens: int, stream: bool = False) -> None:
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0,
                "stream": stream}
        try:
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
                for _ in r.iter_bytes():
                    pass
        except httpx.HTTPError:
            pass       # cut by the stop

    # the agents' conversations: answered side by side, so each holds a slot
    agents = [threading.Thread(target=chat, args=(prompt(i, args.history_words), 8)) for i in range(3)]
    for t in agents:
        t.start()
    for t in agents:
        t.join()
    running = threading.Thread(target=chat, args=(prompt(9, args.long_words), args.max_tokens, True), daemon=True)
    running.start()
    # the moment: a prompt piece under way (its prompt part read) or the answer streaming
    t0 = time.time()
    while time.time() - t0 < 300:
        slots = httpx.get(url + "/v1/slots", timeout=30).json()["slots"]
        if any(s.get("state") == args.during and s.get("tokens", 0) > args.min_read for s in slots):
            break
        time.sleep(0.1)
    time.sleep(args.settle_s)
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(600)
    stop_s = time.time() - sent
    phases, lines = [], []
    for line in log_path.read_text(errors="replace").splitlines():
        m = LINE_TIME.match(line)
        if not m:
            continue
        at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() - sent
        if at < -0.5:
            continue
        p = PHASE.match(line)
        if p:
            phases.append((round(at, 3), p.group(2), p.group(3)))
        elif m.group(2) != "strata.stop_phases":
            lines.append((round(at, 3), m.group(3)[:160]))
    return {"arm": arm, "stop_s": round(stop_s, 2), "rc": rc, "phases": phases, "lines": lines,
            "load": os.getloadavg()[0]}


def main() -> None:
    if "--child" in sys.argv:
        child()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--during", choices=("prefill", "decode"), default="prefill")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--model", default="", help="a GGUF path or id (default: the default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--history-words", type=int, default=1500, help="each held conversation's prompt, in words")
    ap.add_argument("--long-words", type=int, default=5000, help="the running request's prompt, in words")
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--min-read", type=int, default=600, help="tokens in the running request's context first")
    ap.add_argument("--settle-s", type=float, default=0.3)
    ap.add_argument("--arms", default="interrupt",
                    help="comma-separated, alternated run by run: interrupt (this tree), wait (the step under way "
                         "waited for, as before Engine.interrupt)")
    ap.add_argument("--serve-arg", action="append", default=[], help="a flag for the server, e.g. --serve-arg=--solo-slice-ms=0")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    arms = args.arms.split(",")
    if not set(arms) <= {"interrupt", "wait"}:
        ap.error(f"--arms takes interrupt and wait, got {args.arms!r}")
    for i in range(args.runs):
        for arm in arms:
            with tempfile.TemporaryDirectory(prefix="stop-phases-") as tmp:
                out = one_run(args, Path(tmp), arm)
            show(i, out, args.json)


def show(i: int, out: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(out), flush=True)
        return
    print(f"run {i + 1} {out['arm']}: stop {out['stop_s']:.2f} s (rc {out['rc']}, load {out['load']:.1f})")
    for at, what, label in out["phases"]:
        print(f"  {at:7.3f} s  {what:6} {label}")
    for at, text in out["lines"]:
        print(f"  {at:7.3f} s  | {text}", flush=True)


if __name__ == "__main__":
    main()
