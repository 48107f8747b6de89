"""Start-up time with batch slots: `strata serve --no-config --port 0 --batch B --ctx C --kv-type K` on the
default model, timed from the process start to its `listening on` line and to the start-up INFO line
(`... (loaded in N s)`) with the server's user / system CPU seconds by then (/proc), and where the engine's part goes: `Engine(...)` alone in a fresh process, its wall
time and its user / system CPU seconds (the KV backing at load is system time: the kernel hands out and
zeroes the pages; the weight packing is user time), with the 2 MiB pages the kernel gave it (/proc/vmstat
thp_fault_alloc) and any direct compaction it stalled on (compact_stall).

Every configuration runs once a round, in a shuffled order each round (alternated rounds on a shared
machine); the table prints medians and each batch's ratio to --batch 0 at the same context and KV type.

    .venv/bin/python benchmarks/startup_slots.py [--rounds 3] [--batches 0,4,8] [--ctx 8192,16384]
        [--kv f16,q8_0] [--serve-only] [--pause S]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
VMSTAT_KEYS = ("thp_fault_alloc", "compact_stall")

ENGINE_ONLY = """
import resource, sys, time
from strata.engine import Engine
from strata.engine.models import default_model_path
b, ctx, kv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
r0 = resource.getrusage(resource.RUSAGE_SELF)
t = time.monotonic()
e = Engine(str(default_model_path()), n_ctx=ctx, n_slots=b, slot_ctx=ctx if b else None, kv_type=kv)
wall = time.monotonic() - t
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(wall, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime)
"""


def vmstat() -> dict[str, int]:
    try:
        lines = Path("/proc/vmstat").read_text().split("\n")
    except OSError:
        return {}
    pairs = (line.split() for line in lines if line)
    return {k: int(v) for k, v in pairs if k in VMSTAT_KEYS}


def cpu_seconds(pid: int) -> tuple[float, float]:
    """A process's user and system CPU seconds so far (all its threads), from /proc; zeros elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def serve_once(batch: int, ctx: int, kv: str, timeout_s: float) -> tuple[float, float, float, float]:
    """Seconds from the process start to `listening on` and to the INFO line; the server's user and system
    CPU seconds at the INFO line."""
    cmd = [PYTHON, "-m", "strata", "serve", "--no-config", "--port", "0", "--batch", str(batch),
           "--ctx", str(ctx), "--kv-type", kv]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    listening = info = None
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            now = time.monotonic() - t0
            if "listening on" in line and "(loading the model)" in line:
                listening = now
            elif "(loaded in" in line:
                info = now
                user, system = cpu_seconds(proc.pid)
                break
            if now > timeout_s:
                break
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if listening is None or info is None:
        raise SystemExit(f"startup_slots: {' '.join(cmd)} gave no listening / INFO line in {timeout_s:.0f} s")
    return listening, info, user, system


def engine_once(batch: int, ctx: int, kv: str) -> tuple[float, float, float, dict[str, int]]:
    before = vmstat()
    out = subprocess.run([PYTHON, "-c", ENGINE_ONLY, str(batch), str(ctx), kv], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    after = vmstat()
    wall, user, system = (float(x) for x in out[-3:])
    return wall, user, system, {k: after[k] - before.get(k, 0) for k in after}


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int_list, default=[0, 4, 8])
    ap.add_argument("--ctx", type=int_list, default=[8192, 16384])
    ap.add_argument("--kv", default="f16,q8_0")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a start may take")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serve-only", action="store_true", help="time the servers only (no Engine() runs)")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds to wait before each start: memory given back that long is slower to get again "
                         "in a VM whose host takes freed memory back (the first start of the day, not a restart)")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.pause < 0:
        ap.error(f"--pause must be 0 or more seconds, got {args.pause}")
    configs = [(b, c, k) for b in args.batches for c in args.ctx for k in args.kv.split(",")]
    rng = random.Random(args.seed)
    rows: dict[tuple[int, int, str], list[tuple[float, ...]]] = {c: [] for c in configs}
    for r in range(args.rounds):
        order = configs[:]
        rng.shuffle(order)
        load = os.getloadavg()[0]
        print(f"round {r + 1} ({time.strftime('%H:%M:%S', time.gmtime())} UTC, load {load:.1f})", flush=True)
        for b, c, k in order:
            # Engine() first: the server after it finds the memory it just gave back (faster to hand out again)
            wall, user, system, vm = (0.0, 0.0, 0.0, {}) if args.serve_only else engine_once(b, c, k)
            time.sleep(args.pause)
            listening, info, s_user, s_sys = serve_once(b, c, k, args.timeout)
            rows[(b, c, k)].append((listening, info, wall, user, system, s_user, s_sys))
            print(f"  batch {b} ctx {c} kv {k}: listening {listening:.2f} s, INFO {info:.2f} s "
                  f"(listening->INFO {info - listening:.2f}; server user {s_user:.2f}, sys {s_sys:.2f}); "
                  f"Engine() {wall:.2f} s wall, user {user:.2f}, "
                  f"sys {system:.2f}, 2 MiB pages {vm.get('thp_fault_alloc', 0)}, "
                  f"compaction stalls {vm.get('compact_stall', 0)}", flush=True)

    def med(key: tuple[int, int, str], i: int) -> float:
        return statistics.median(row[i] if i >= 0 else row[1] - row[0] for row in rows[key])

    print("\n| batch | ctx | KV | start->listening | start->INFO | listening->INFO | x batch 0 (start->INFO) "
          "| server user / sys at INFO | Engine() wall | user | sys | each round's start->INFO |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for b, c, k in configs:
        base = (args.batches[0], c, k)
        ratio = med((b, c, k), 1) / med(base, 1)
        each = ", ".join(f"{row[1]:.1f}" for row in rows[(b, c, k)])
        print(f"| {b} | {c} | {k} | {med((b, c, k), 0):.2f} | {med((b, c, k), 1):.2f} | {med((b, c, k), -1):.2f} "
              f"| {ratio:.2f} | {med((b, c, k), 5):.2f} / {med((b, c, k), 6):.2f} | {med((b, c, k), 2):.2f} | {med((b, c, k), 3):.2f} | {med((b, c, k), 4):.2f} | {each} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
