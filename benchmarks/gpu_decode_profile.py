"""Where a CUDA decode step's time goes (benchmarks/gpu_decode_profile.sh runs it on a lent GPU).

    python3 benchmarks/gpu_decode_profile.py time MODEL [--steps 64] [--rows 1]
    python3 benchmarks/gpu_decode_profile.py torch MODEL [--steps 16]   # per-kernel device time (CUPTI)
    python3 benchmarks/gpu_decode_profile.py ncu MODEL [--steps 2]      # under ncu --profile-from-start off

`time`: prefill 512 tokens, 8 warm-up decode steps (graphs captured), then --steps steps timed one by
one: wall ms per step (median, mean, min) as one JSON line. STRATA_CUDA_GRAPHS=0 in the environment
times the direct launches. `torch`: the same steps under torch.profiler (CUPTI sees every kernel of
the process, Strata's included): per-kernel device time, the CUDA runtime calls' host time, and per
step the kernels' busy time against the step's wall time. `ncu`: cuProfilerStart / Stop around the
steps, so `ncu --profile-from-start off` sees only decode kernels. Not a test (no assertion).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_vs_llamacpp import prompt_tokens  # noqa: E402

N_PROMPT = 512
N_WARM = 8


def ready_engine(model: str, rows: int, steps: int, backend: str = "cuda"):
    from strata.engine import Engine

    e = Engine(model, n_ctx=N_PROMPT + N_WARM + steps + 8, n_slots=rows,
               slot_ctx=N_PROMPT + N_WARM + steps + 8, n_threads=2, backend=backend)
    toks = prompt_tokens(e.n_vocab, N_PROMPT + N_WARM + steps)
    ctxs = list(range(1, rows + 1)) if rows > 1 else [0]
    for c in ctxs:
        e.prefill(c, toks[:N_PROMPT])
    for t in toks[N_PROMPT : N_PROMPT + N_WARM]:
        e.decode(ctxs, [t] * len(ctxs))
    return e, ctxs, toks[N_PROMPT + N_WARM :]


def cmd_time(a) -> None:
    e, ctxs, steps = ready_engine(a.model, a.rows, a.steps, a.backend)
    ms = []
    for t in steps:
        t0 = time.perf_counter()
        e.decode(ctxs, [t] * len(ctxs))
        ms.append(1000 * (time.perf_counter() - t0))
    print(json.dumps({"model": Path(a.model).name, "rows": a.rows, "steps": len(ms),
                      "median_ms": round(statistics.median(ms), 4), "mean_ms": round(statistics.mean(ms), 4),
                      "min_ms": round(min(ms), 4), "tok_s": round(1000 * a.rows / statistics.median(ms), 1)}))


def cmd_torch(a) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    e, ctxs, steps = ready_engine(a.model, a.rows, a.steps, a.backend)
    walls = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for t in steps:
            t0 = time.perf_counter()
            e.decode(ctxs, [t] * len(ctxs))
            walls.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=60))
    kern = []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            kern.append((ev.time_range.start, ev.time_range.end, ev.name))
    kern.sort()
    if kern:
        busy = sum(e1 - s for s, e1, _ in kern)
        span = kern[-1][1] - kern[0][0]
        print(f"device events: {len(kern)} ({len(kern) / len(steps):.1f} a step), busy {busy / len(steps):.1f} us "
              f"a step, first-to-last span {span / len(steps):.1f} us a step, wall {1e6 * statistics.mean(walls):.1f}"
              f" us a step (mean of {len(walls)})")
        gaps = [kern[i + 1][0] - kern[i][1] for i in range(len(kern) - 1)]
        big = sorted(gaps)[-10:]
        print("gaps between device events, us: median", round(statistics.median(gaps), 2),
              "mean", round(statistics.mean(gaps), 2), "largest", [round(g, 1) for g in big])
        per = {}
        for s, e1, n in kern:
            c, d = per.get(n, (0, 0.0))
            per[n] = (c + 1, d + (e1 - s))
        print("per kernel (calls a step, us a step, us a call):")
        for n, (c, d) in sorted(per.items(), key=lambda kv: -kv[1][1]):
            print(f"  {d / len(steps):9.1f} us  {c / len(steps):6.1f} x  {d / c:8.2f} us  {n[:110]}")
    else:
        print("torch.profiler saw no device events")


def cmd_ncu(a) -> None:
    e, ctxs, steps = ready_engine(a.model, a.rows, a.steps, a.backend)
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuProfilerStart()
    for t in steps:
        e.decode(ctxs, [t] * len(ctxs))
    cuda.cuProfilerStop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=("time", "torch", "ncu"))
    p.add_argument("model")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--backend", default="cuda", help="cpu: a dry run of the script's logic anywhere")
    a = p.parse_args()
    if a.steps is None:
        a.steps = {"time": 64, "torch": 16, "ncu": 2}[a.mode]
    if a.steps < 1 or a.rows < 1 or a.rows > 16:
        p.error(f"--steps must be >= 1 and --rows in [1, 16], got {a.steps} and {a.rows}")
    {"time": cmd_time, "torch": cmd_torch, "ncu": cmd_ncu}[a.mode](a)


if __name__ == "__main__":
    main()
