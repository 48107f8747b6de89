"""What scoring a prompt costs (`/v1/completions` with `echo` and `logprobs`) against reading it ordinarily, on
the engine alone: the same prompt read in the scheduler's ordinary pieces (Engine.prefill, the last position's
logits kept) and in its scored pieces (Engine.extend, every position's logits, at most max_logit_rows a forward,
then server/prompt_scoring.piece_entries turning each row into a log-probability and its alternatives).

    .venv/bin/python benchmarks/prompt_scoring_cost.py [MODEL.gguf] [--prompt 1024] [--piece 128] [--reps 5]

Prints the best and median of the repetitions (run in turns, so a busy machine slows each alike) as tokens/s.
What it is not: a test, or the server's time (benchmarks/prefill_depth_server.py reads prompts through it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def read(e, tokens: list[int], kind: str, piece: int, top: int) -> float:
    from strata.server.prompt_scoring import SCORE_PIECE_ROWS, piece_entries

    e.truncate(0, 0)
    step = piece if kind == "prefill" else min(piece, SCORE_PIECE_ROWS, e.max_logit_rows)
    t0 = time.perf_counter()
    for s in range(0, len(tokens), step):
        part = tokens[s:s + step]
        if kind == "prefill":
            e.prefill(0, part)
            continue
        logits = e.extend([(0, part)])
        if kind == "scored":
            piece_entries(logits, tokens, s, top)
    return time.perf_counter() - t0


def main() -> None:
    from strata.engine import Engine

    from tests.conftest import find_default_model

    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--piece", type=int, default=128, help="ordinary pieces' tokens (the scheduler's slice)")
    ap.add_argument("--top", type=int, default=1, help="alternatives a token (logprobs N)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    path = a.model or str(find_default_model())
    e = Engine(path, n_ctx=a.prompt + 64, n_threads=a.threads)
    tokens = [int(t) for t in np.random.default_rng(0).integers(100, min(e.n_vocab, 30000), a.prompt)]
    kinds = ("prefill", "extend", "scored")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(a.reps):
        for k in kinds:
            times[k].append(read(e, tokens, k, a.piece, a.top))
    print(f"{Path(path).name}: {a.prompt}-token prompt, ordinary pieces {a.piece}, scored pieces "
          f"{min(a.piece, e.max_logit_rows)}, logprobs {a.top}, {a.threads} threads, {a.reps} turns")
    print("| read | best tok/s | median tok/s |\n| --- | ---: | ---: |")
    for k in kinds:
        print(f"| {k} | {a.prompt / min(times[k]):.0f} | {a.prompt / statistics.median(times[k]):.0f} |")


if __name__ == "__main__":
    main()
