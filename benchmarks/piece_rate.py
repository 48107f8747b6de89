"""What reading a prompt in smaller pieces costs: prompt tokens/s read in pieces of 16 to 512 tokens
(`Engine.prefill`, one forward a piece), at a shallow and a deep history, on any GGUF.

Why: a prompt read alone goes in --solo-slice-ms pieces (about a second at the measured rate) so that a request
arriving beside it waits about that long, not a whole --prefill-chunk piece. A piece reads the weights once, so
small pieces read at a poorer rate where the weights' read dominates (a shallow history, a large model); at a deep
history each token's attention dominates. This prints the rate of each piece size against 512-token pieces.

    .venv/bin/python benchmarks/piece_rate.py [MODEL.gguf] [--depths 0,6000] [--tokens 512] [--reps 3]
        [--sizes 16,32,64,128,256,512] [--threads 2]

The sizes alternate within each repetition (16, 32, ..., 512, then again), the history cut back to its depth
after each (Engine.truncate), so load changes hit every size alike; each size's rate is the median of the reps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rates(path: str, depth: int, n_tokens: int, sizes: list[int], reps: int, threads: int) -> dict[int, float]:
    from strata.engine import Engine

    e = Engine(path, n_ctx=depth + n_tokens + 64, n_threads=threads)
    rng = np.random.default_rng(depth)
    if depth:
        e.prefill(0, [int(x) for x in rng.integers(10, e.n_vocab - 10, depth)])
    tokens = [int(x) for x in rng.integers(10, e.n_vocab - 10, n_tokens)]
    seen: dict[int, list[float]] = {k: [] for k in sizes}
    for _ in range(reps):
        for k in sizes:
            t0 = time.perf_counter()
            for i in range(0, n_tokens, k):
                e.prefill(0, tokens[i:i + k], chunk=k)
            seen[k].append(n_tokens / (time.perf_counter() - t0))
            e.truncate(0, depth)
    return {k: statistics.median(v) for k, v in seen.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=None, help="a GGUF (default: the installed default model)")
    ap.add_argument("--depths", default="0,6000", help="history tokens before the pieces, comma-separated")
    ap.add_argument("--tokens", type=int, default=512, help="tokens read at each size (a multiple of every size)")
    ap.add_argument("--sizes", default="16,32,64,128,256,512")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.model is None:
        from strata.engine.models import default_model_path

        args.model = str(default_model_path())
    sizes = [int(x) for x in args.sizes.split(",")]
    print("| history | " + " | ".join(f"{k}" for k in sizes) + " |")
    print("| ---: | " + " | ".join("---:" for _ in sizes) + " |")
    for depth in (int(x) for x in args.depths.split(",")):
        r = rates(args.model, depth, args.tokens, sizes, args.reps, args.threads)
        base = r[max(sizes)]
        print(f"| {depth} | " + " | ".join(f"{r[k]:.0f} t/s ({r[k] / base:.2f}x)" for k in sizes) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
