"""What lookup decoding's check costs: one forward of k tokens (`Engine.extend`, logits after each)
against one decode step, after a prompt, on any GGUF.

Why: a guessed token pays when it is taken more often than its share of the check's extra cost. On a
dense model every row of a check reads the same weights, so the cost grows slowly with k; with experts
each guessed row runs experts of its own (server/lookup.py `default_max_draft` turns lookup off there).

    .venv/bin/python benchmarks/extend_cost.py MODEL.gguf [MODEL2.gguf ...] [--prompt 400] [--reps 15]

Prints per model the time of one token (p25 of the repetitions) and the ratios for k = 2, 3, 5, 9.
What it is not: a test, or a measure of how often guesses are taken (benchmarks/lookup_decoding.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

K_VALUES = (2, 3, 5, 9)


def costs(path: str, n_prompt: int, reps: int, threads: int) -> tuple[float, dict[int, float]]:
    from strata.engine import Engine

    e = Engine(path, n_ctx=n_prompt + 64, n_threads=threads)
    rng = np.random.default_rng(0)
    e.prefill(0, [int(x) for x in rng.integers(10, e.n_vocab - 10, n_prompt)])

    def p25(k: int) -> float:
        times = []
        for r in range(reps):
            tokens = [int(x) for x in np.random.default_rng(r).integers(10, e.n_vocab - 10, k)]
            t0 = time.perf_counter()
            e.extend([(0, tokens)])
            times.append(time.perf_counter() - t0)
            e.truncate(0, n_prompt)
        return float(np.percentile(times, 25))

    one = p25(1)
    return one, {k: p25(k) / one for k in K_VALUES}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--prompt", type=int, default=400, help="tokens before the checks")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    print("| model | 1 token | " + " | ".join(str(k) for k in K_VALUES) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in K_VALUES) + " |")
    for path in args.models:
        one, ratios = costs(path, args.prompt, args.reps, args.threads)
        print(f"| {Path(path).name} | {one * 1e3:.2f} ms | " + " | ".join(f"{ratios[k]:.2f}x" for k in K_VALUES) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
