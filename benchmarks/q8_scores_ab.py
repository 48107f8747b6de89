"""Side by side: a decode step's q8_0 K scores (kernels.attention_scores: attention-q8.cpp's scores_q8_tiled, the
query heads' quantization included, no softmax or values) in two or more _engine builds, each run in its own
subprocess, the builds alternated round after round (builds_ab.alternate: on a shared machine only a comparison
inside one run means anything). With --group, also the whole decode attention of 3 query heads (attention_group:
scores, softmax, values).

One kv head of SmolLM2-135M's shape (head size 64) over --positions (2K and 8K by default), 1-4 query heads a kv
head; microseconds a call, CPU time of one thread (time.process_time), the best of --reps timings a round (the
shapes timed in turn, --reps times: a burst of other work costs one timing of each, not all of one), each timing
--calls calls at the most positions (proportionally more at fewer), the scores' inside one binding call (`repeat`:
no Python between them). Prints each build's best over the rounds, the ratio baseline / build (above 1: the build is faster)
of the bests and of every round, and whether every build gave the same scores (a hash of the floats). Not a test.

    .venv/bin/python benchmarks/q8_scores_ab.py /tmp/base/_engine*.so build/*/_engine*.so --rounds 6
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from builds_ab import alternate  # noqa: E402

Q8_0 = 8         # the engine's type id of q8_0 KV
HEAD_DIM = 64    # SmolLM2-135M's
SCALE = 0.125    # 1 / sqrt(64)


def worker(so: str, positions: list[int], heads: list[int], reps: int, calls: int, group: bool) -> dict:
    from kv_types import load_engine_from

    load_engine_from(so)
    import numpy as np
    import strata._engine as native

    k_ = native.kernels
    rng = np.random.default_rng(36)
    n = max(positions)
    kf = rng.standard_normal((n, HEAD_DIM)).astype(np.float32)
    vf = rng.standard_normal((n, HEAD_DIM)).astype(np.float32)
    kb, vb = k_.kv_pack(Q8_0, 1, HEAD_DIM, kf, vf)
    q = rng.standard_normal((max(heads), HEAD_DIM)).astype(np.float32)
    digest, runs = hashlib.sha1(), {}   # key -> (function, calls inside it)
    for p in positions:
        m = max(1, calls * max(positions) // p)
        for h in heads:
            qh = np.ascontiguousarray(q[:h])
            digest.update(k_.attention_scores(Q8_0, 1, HEAD_DIM, kb, qh, 0, p, SCALE).tobytes())

            def scores(qh=qh, p=p, m=m):
                k_.attention_scores(Q8_0, 1, HEAD_DIM, kb, qh, 0, p, SCALE, m)
            runs[f"scores {p} x{h}"] = (scores, m)
        if group:
            def run(p=p, m=m, q3=np.ascontiguousarray(q[:3])):
                for _ in range(m):
                    k_.attention_group(Q8_0, 1, HEAD_DIM, kb, vb, q3, 0, p, SCALE)
            runs[f"group {p} x3"] = (run, m)
    # the keys in turn, --reps times, each keeping its best: a burst of other work on the machine costs one
    # timing of each key, not all of one key's
    times = dict.fromkeys(runs, float("inf"))
    for fn, _ in runs.values():
        fn()   # warm: K in cache, as a decode step's own tiles after the first call
    for _ in range(reps):
        for key, (fn, m) in runs.items():
            t0 = time.process_time()
            fn()
            times[key] = min(times[key], (time.process_time() - t0) / m * 1e6)
    return {"us": times, "scores_sha1": digest.hexdigest()}


def report(builds: list[str], runs: list[list[dict]]) -> None:
    """Each build's best microseconds over the rounds and baseline / build (bests, then round by round)."""
    print(f"microseconds a call, best of {len(runs[0])} alternated rounds; ratio = baseline / build (> 1: faster)")
    for i, so in enumerate(builds):
        same = {r["scores_sha1"] for r in runs[i]} == {runs[0][0]["scores_sha1"]}
        print(f"  [{i}] {so}  (scores {'the same as' if same else 'DIFFER from'} [0]'s)")
    for key in runs[0][0]["us"]:
        best = [min(r["us"][key] for r in runs[i]) for i in range(len(builds))]
        line = f"{key:16s} " + " ".join(f"{b:8.2f}" for b in best)
        for i in range(1, len(builds)):
            per_round = " ".join(f"{a['us'][key] / b['us'][key]:.2f}" for a, b in zip(runs[0], runs[i], strict=True))
            line += f"  [{i}] x{best[0] / best[i]:.3f} (rounds {per_round})"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="*", help="_engine .so files (with kernels.attention_scores); the first is the baseline")
    ap.add_argument("--positions", default="2048,8192", help="KV positions, comma-separated (default %(default)s)")
    ap.add_argument("--heads", default="1,2,3,4", help="query heads a kv head, 1-4 (default %(default)s)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=15, help="timings a round (the best is kept)")
    ap.add_argument("--calls", type=int, default=40, help="calls a timing at the most positions")
    ap.add_argument("--group", action="store_true", help="also time attention_group (3 heads)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        positions = [int(x) for x in args.positions.split(",")]
        heads = [int(x) for x in args.heads.split(",")]
    except ValueError:
        ap.error(f"--positions and --heads take comma-separated integers (got {args.positions!r}, {args.heads!r})")
    if min(positions) < 1:
        ap.error(f"--positions must be at least 1 (got {args.positions})")
    if not all(1 <= h <= 4 for h in heads):
        ap.error(f"--heads must be 1-4, the kernel's heads a pass (got {args.heads})")
    if args.rounds < 1 or args.reps < 1 or args.calls < 1:
        ap.error(f"--rounds, --reps and --calls must be at least 1 (got {args.rounds}, {args.reps}, {args.calls})")
    wargs = ["--positions", args.positions, "--heads", args.heads, "--reps", str(args.reps), "--calls", str(args.calls)]
    if args.group:
        wargs.append("--group")
    if args.worker:
        print(json.dumps(worker(args.worker, positions, heads, args.reps, args.calls, args.group)))
        return
    if len(args.builds) < 2:
        ap.error("give two or more _engine .so files (the baseline first)")
    for so in args.builds:
        if not Path(so).is_file():
            ap.error(f"no file {so}")
    report(args.builds, alternate(__file__, args.builds, args.rounds, wargs))


if __name__ == "__main__":
    main()
