"""Prompt reading where attention dominates: one long prompt's prefill, and a prompt piece (plus
decode riders) at long histories, on the default model.

What it does: prefills --tokens tokens (chunks of 512) into one context and prints seconds and
tokens/s; then, for each history in --histories, the best of --reps mixed steps of a --piece-token
prompt piece at that history plus 3 one-token decode rows at the same history (ms per step).

    .venv/bin/python benchmarks/prefill_long.py --threads 2 [--tokens 8192] [--histories 6000,2000,300]

What it is not: a test (no assertion), or a comparison with llama.cpp (engine_vs_llamacpp.py).
"""

from __future__ import annotations

import argparse
import time

from strata.engine import Engine
from strata.engine.models import default_model_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="GGUF file (default: the default model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=8192, help="the long prompt's length")
    ap.add_argument("--histories", default="6000,2000,300", help="comma-separated, longest first")
    ap.add_argument("--piece", type=int, default=32, help="prompt piece tokens per mixed step")
    ap.add_argument("--reps", type=int, default=8)
    a = ap.parse_args()
    histories = sorted((int(h) for h in a.histories.split(",") if h), reverse=True)
    if a.tokens < 1 or any(h < 1 for h in histories):
        raise SystemExit("--tokens and --histories must be positive")
    longest = max([a.tokens] + [h + a.piece for h in histories])
    n_ctx = (longest + 255) // 256 * 256
    model = a.model or str(default_model_path())
    e = Engine(model, n_ctx=n_ctx, n_slots=4, slot_ctx=n_ctx, n_threads=a.threads)
    toks = [10 + (i * 7919) % 40000 for i in range(longest)]

    e.prefill(0, toks[:512])
    e.truncate(0, 0)
    t0 = time.perf_counter()
    e.prefill(0, toks[:a.tokens])
    dt = time.perf_counter() - t0
    print(f"prefill {a.tokens} tokens, {a.threads} threads: {dt:.2f} s, {a.tokens / dt:.0f} tok/s")

    if not histories:
        return
    for c in (0, 1, 2, 3):   # every context holds the longest history; truncation only shortens
        e.truncate(c, 0)
        e.prefill(c, toks[:histories[0]])
    for hist in histories:
        best = float("inf")
        for _ in range(a.reps):
            for c in (0, 1, 2, 3):
                e.truncate(c, hist)
            t0 = time.perf_counter()
            e.step([(0, toks[hist:hist + a.piece])], [1, 2, 3], [toks[5]] * 3)
            best = min(best, time.perf_counter() - t0)
        print(f"history {hist:6d}: piece {a.piece} + 3 riders {best * 1000:8.2f} ms")


if __name__ == "__main__":
    main()
