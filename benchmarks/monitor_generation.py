"""Token generation with the monitor window open against closed: the default model served by
`strata serve --threads 2`, one client streaming answers, rounds alternating closed / open (the window offscreen:
it paints into an image as it would on a screen). Prints each round's decode tokens/s and the monitor's CPU,
then the open / closed ratio of each pair of rounds (the machine may be shared: compare within a run).

Run: .venv/bin/python benchmarks/monitor_generation.py [--rounds 3] [--requests 6] [--max-tokens 200] [--fill 24]
     [--monitor-src DIR]   (another version's monitor/ folder, e.g. from `git archive <rev> monitor`: before/after)
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRATA = str(Path(sys.executable).with_name("strata"))
PROMPT = "Write a long story about a lighthouse keeper and the ships she guides through winter storms."


# `strata monitor` with strata.monitor taken from another folder (the editable install maps it to this checkout)
BOOT = """
import importlib.machinery, sys
src = sys.argv.pop(1)
class Elsewhere:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "strata.monitor" or name.startswith("strata.monitor."):
            parts = name.split(".")[2:]
            where = "/".join([src, *parts[:-1]]) if parts else src.rsplit("/", 1)[0]
            return importlib.machinery.PathFinder.find_spec(name, [where])
        return None
sys.meta_path.insert(0, Elsewhere)
from strata.cli import main
sys.argv[0] = "strata"
raise SystemExit(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def decode_rate(client, max_tokens: int) -> float:
    """Tokens/s of one streamed answer, from its first token to its last."""
    first = last = None
    n = 0
    stream = client.chat.completions.create(model="default", messages=[{"role": "user", "content": PROMPT}],
                                            max_tokens=max_tokens, temperature=0.8, stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
            n += 1
    return (n - 1) / (last - first) if n > 1 and last > first else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=6, help="streamed answers a round")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--fill", type=int, default=24, help="short requests first: the monitor's tables full from round 1")
    ap.add_argument("--monitor-src", help="a monitor/ folder to run instead of this checkout's")
    args = ap.parse_args(argv)
    from openai import OpenAI

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([STRATA, "serve", "--threads", "2", "--port", str(port)], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    monitor = None
    try:
        client = OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
        deadline = time.monotonic() + 120
        while True:
            try:
                decode_rate(client, 4)                        # answers once the model is loaded
                break
            except Exception:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.5)
        for _ in range(args.fill):          # the requests table full, as on a server that has been working a while
            decode_rate(client, 8)
        ratios = []
        for rnd in range(1, args.rounds + 1):
            rates = {}
            for state in ("closed", "open"):
                cpu = ""
                if state == "open":
                    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
                    command = [sys.executable, "-c", BOOT, str(Path(args.monitor_src).resolve())] if args.monitor_src \
                        else [STRATA]
                    monitor = subprocess.Popen([*command, "monitor", "--url", url, "--theme", "light"], cwd=ROOT, env=env,
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(4)                             # started, connected, drawing
                    c0, t0 = cpu_seconds(monitor.pid), time.monotonic()
                got = [decode_rate(client, args.max_tokens) for _ in range(args.requests)]
                if monitor is not None:
                    share = (cpu_seconds(monitor.pid) - c0) / (time.monotonic() - t0)
                    cpu = f", monitor {share * 100:.1f} % of a core"
                    monitor.terminate()
                    monitor.wait(30)
                    monitor = None
                rates[state] = statistics.median(got)
                print(f"round {rnd} {state:6}: {rates[state]:.1f} tok/s (median of {len(got)}){cpu}; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
            ratios.append(rates["open"] / rates["closed"])
            print(f"round {rnd}: open / closed {ratios[-1]:.3f}", flush=True)
        print(f"open / closed, median of {len(ratios)} rounds: {statistics.median(ratios):.3f}")
    finally:
        if monitor is not None:
            monitor.terminate()
        server.terminate()
        server.wait(60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
