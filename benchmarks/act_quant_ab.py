"""Side by side: the activations of the packed Q4_1 / Q8_0 / IQ4_NL products quantized into prepared rows
(kernels.quantize_act_packed: on AVX2 builds the fused quantizer of quants-packed-avx2.cpp) in two or more
_engine builds, each run in its own subprocess, the builds alternated round after round (on a shared machine
only a comparison inside one run means anything). A build without quantize_act_packed (before 5783728) runs
the two steps it replaced through the binding, quantize_act_row then prepare_act_packed.

Per type and row length (576, 1536: SmolLM2-135M's n_embd and n_ff): millions of rows a second, 64 rows a
call (in L2, as the engine's few rows a decode step), 50 calls a timing. Each build's best over the rounds,
then the ratio of each later build to the first. CPU time of one thread (time.process_time). Not a test.

    .venv/bin/python benchmarks/act_quant_ab.py /tmp/base/_engine*.so build/*/_engine*.so --rounds 10
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from builds_ab import alternate, print_best  # noqa: E402

ROWS = 64      # rows a call
CALLS = 50     # calls a timing (one call of 64 rows takes ~15-35 us)


def worker(so: str, types: str, reps: int) -> dict:
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    from kv_types import load_engine_from

    load_engine_from(so)
    import numpy as np

    from benchmarks.kernels import best
    from tests.native.kernel_data import TYPE_IDS, K, random_activations

    if hasattr(K, "quantize_act_packed"):
        quantize = K.quantize_act_packed
    else:   # the two steps the engine ran before 5783728
        def quantize(tid, x):
            return K.prepare_act_packed(tid, K.quantize_act_row(tid, x), x.shape[1])
    rng = np.random.default_rng(1)
    out = {}
    for name in types.split(","):
        tid = TYPE_IDS[name]
        for n in (576, 1536):
            x = random_activations(rng, ROWS, n)

            def run(tid=tid, x=x):
                for _ in range(CALLS):
                    quantize(tid, x)
            out[f"{name} n={n}"] = ROWS * CALLS / best(run, reps) / 1e6
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="*", help="_engine .so files; the first is the baseline")
    ap.add_argument("--types", default="Q4_1,Q8_0,IQ4_NL")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20, help="timings a round (the best is kept)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rounds < 1 or args.reps < 1:
        ap.error(f"--rounds and --reps must be at least 1 (got {args.rounds}, {args.reps})")
    if args.worker:
        print(json.dumps(worker(args.worker, args.types, args.reps)))
        return
    if not args.builds:
        ap.error("give one or more _engine .so files")
    runs = alternate(__file__, args.builds, args.rounds, ["--types", args.types, "--reps", str(args.reps)])
    print_best(f"millions of rows a second ({ROWS} a call), best of {args.rounds} alternated rounds:", args.builds, runs,
               14, "6.2f")


if __name__ == "__main__":
    main()
