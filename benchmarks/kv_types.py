"""Decode speed of the two KV types (f16, q8_0) on the default model: 1 and 4 rows after a history of
N tokens each, 2 threads, the best of R repetitions of 32 steps. Not a test; figures in RESULTS.md.

    .venv/bin/python benchmarks/kv_types.py [--history 2048] [--reps 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_vs_llamacpp import prompt_tokens  # noqa: E402
from strata.engine import Engine  # noqa: E402
from strata.engine.models import default_model_path  # noqa: E402

STEPS = 32


def best_rates(kv_type: str, n_hist: int, reps: int) -> dict[int, float]:
    e = Engine(str(default_model_path()), n_ctx=n_hist + 64, n_slots=4, slot_ctx=n_hist + 64, n_threads=2,
               kv_type=kv_type)
    toks = prompt_tokens(e.n_vocab, n_hist + STEPS)
    for c in range(1, 5):
        e.prefill(c, toks[:n_hist])
    best: dict[int, float] = {}
    for _ in range(reps):
        for n in (1, 4):
            ctxs = list(range(1, n + 1))
            for c in ctxs:
                e.truncate(c, n_hist)
            t0 = time.perf_counter()
            for t in toks[n_hist:n_hist + STEPS]:
                e.decode(ctxs, [t] * n)
            best[n] = max(best.get(n, 0.0), n * STEPS / (time.perf_counter() - t0))
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--history", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    for kv in ("f16", "q8_0"):
        r = best_rates(kv, args.history, args.reps)
        print(f"{kv:5s} history {args.history}: 1 row {r[1]:.0f} tok/s, 4 rows {r[4]:.0f} tok/s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
