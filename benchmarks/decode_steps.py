"""Milliseconds a decode step of engine builds side by side: each build (its _engine .so) in its own
process, alternated for --rounds rounds; each process reads a history of --history tokens into --rows
contexts, then times --windows windows of 8 steps and prints the min / 25th percentile / median.

    .venv/bin/python benchmarks/decode_steps.py --history 550 --rows 4 [--rounds 2] [--kv-type q8_0] [--threads 1] OLD.so NEW.so

A build written BUILD@KV (installed@q8_0) runs with that KV type instead of --kv-type's.

--clock cpu times the steps in this process's CPU seconds (all its threads, the pool's spinning worker
too) instead of wall time: on a machine shared past its cores, where a wall-clock step is mostly the wait
for a core, with --threads 1 it is the step's own work.

--model PATH runs another GGUF than the default model (a generated Q4_K_M-shaped one, say).

A build path of "installed" means the installed strata._engine. Not a test (no assertion).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def worker(so: str, history: int, rows: int, windows: int, kv_type: str = "f16", threads: int = 2,
           clock: str = "wall", model: str | None = None) -> str:
    if so != "installed":
        from kv_types import load_engine_from

        load_engine_from(so)
    from engine_vs_llamacpp import prompt_tokens
    from strata.engine import Engine
    from strata.engine.models import default_model_path

    e = Engine(model or str(default_model_path()), n_ctx=history + 64, n_slots=rows, slot_ctx=history + 64, n_threads=threads,
               kv_type=kv_type)
    toks = prompt_tokens(e.n_vocab, history + 8)
    ctxs = [0] if rows == 1 else list(range(1, rows + 1))
    for c in ctxs:
        e.prefill(c, toks[:history])
    now = time.process_time if clock == "cpu" else time.perf_counter
    ms = []
    for _ in range(windows):
        for c in ctxs:
            e.truncate(c, history)
        t0 = now()
        for i in range(8):
            e.decode(ctxs, [toks[history + i]] * rows)
        ms.append((now() - t0) / 8 * 1000)
    ms.sort()
    unit = "ms" if clock == "wall" else "ms of CPU"
    return f"min {ms[0]:.3f}  p25 {ms[len(ms) // 4]:.3f}  median {ms[len(ms) // 2]:.3f} {unit}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", help="_engine .so files (or 'installed')")
    ap.add_argument("--history", type=int, default=550)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--windows", type=int, default=25)
    ap.add_argument("--kv-type", default="f16", choices=("f16", "q8_0"))
    ap.add_argument("--threads", type=int, default=2, help="engine threads (1 where other work holds a core)")
    ap.add_argument("--clock", default="wall", choices=("wall", "cpu"),
                    help="wall time, or this process's CPU time (a machine shared past its cores; with --threads 1)")
    ap.add_argument("--model", help="GGUF file (default: the default model)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if min(args.history, args.rows, args.rounds, args.windows, args.threads) < 1:
        ap.error("--history, --rows, --rounds, --windows and --threads must be at least 1")

    def split(build: str) -> tuple[str, str]:
        so, _, kv = build.partition("@")
        return so, kv or args.kv_type

    if args.model and not Path(args.model).is_file():
        ap.error(f"--model: no file {args.model}")
    for build in args.builds:
        so, kv = split(build)
        if so != "installed" and not Path(so).is_file():
            ap.error(f"no file {so}")
        if kv not in ("f16", "q8_0"):
            ap.error(f"{build}: KV type {kv!r} (f16 or q8_0)")
    if args.worker:
        so, kv = split(args.builds[0])
        print(worker(so, args.history, args.rows, args.windows, kv, args.threads, args.clock, args.model))
        return 0
    for rnd in range(args.rounds):
        for so in args.builds:
            out = subprocess.run([sys.executable, __file__, "--worker", so, "--history", str(args.history), "--rows",
                                  str(args.rows), "--windows", str(args.windows), "--kv-type", args.kv_type,
                                  "--threads", str(args.threads), "--clock", args.clock]
                                 + (["--model", args.model] if args.model else []),
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(out.stderr[-2000:])
            name = so if "@" in so else f"{so}@{args.kv_type}"   # the path as given: builds may share a file name
            print(f"round {rnd + 1} {name} history {args.history} rows {args.rows}: {out.stdout.strip()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
