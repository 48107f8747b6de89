"""Side by side: the packed Q4_1 / Q8_0 / IQ4_NL / Q4_K / Q5_K / Q6_K products (quants-packed.h) of two or more _engine builds,
each run in its own subprocess, the builds alternated round after round (on a shared machine only a
comparison inside one run means anything).

Per type, row length (576, 1536: SmolLM2-135M's n_embd and n_ff; the K-quants, whose rows are whole super-blocks
of 256: 2048, 5632, as packed_kernels.py) and token count: GMAC/s with about 0.5 MiB
of weights (in L2: compute-bound; 1, 4 and 8 tokens, 8 calls a timing) or, with --stream, 96 MiB (3x the
L3: weights from memory, as a decode step reads them; 1 and 4 tokens, and the GGUF-layout one-token product on the
same weights). Each build's best over the rounds,
then the ratio of each later build to the first, and (--per-round) each round's ratios. CPU time of one thread
(time.process_time). Not a test.

    .venv/bin/python benchmarks/packed_ab.py /tmp/base/_engine*.so build/*/_engine*.so --types Q4_1 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from builds_ab import alternate, print_best, print_rounds  # noqa: E402

L2_ROWS = {576: 1536, 1536: 576, 2048: 448, 5632: 160}   # rows of about 0.5 MiB at each row length
ROW_LENGTHS = {t: (2048, 5632) for t in ("Q4_K", "Q5_K", "Q6_K")}   # whole super-blocks (packed_kernels.py's)
STREAM_BYTES = 96 << 20
CALLS = 8                          # products a timing (one call of 0.5 MiB takes ~50 us)


def worker(so: str, types: str, stream: bool) -> dict:
    sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
    from kv_types import load_engine_from

    load_engine_from(so)
    import numpy as np

    from benchmarks.kernels import best
    from tests.native.kernel_data import TYPE_IDS, K, random_activations, random_weights

    rng = np.random.default_rng(1)
    out = {}
    for name in types.split(","):
        tid = TYPE_IDS[name]
        for n in ROW_LENGTHS.get(name, (576, 1536)):
            base = random_weights(rng, name, 64, n)
            rows = (STREAM_BYTES // base.shape[1] if stream else L2_ROWS[n]) // 64 * 64   # whole tiles of the 64-row base
            pw = K.pack_rows(tid, np.ascontiguousarray(np.tile(base, (rows // 64, 1))), n)
            xp = K.prepare_act_packed(tid, K.quantize_act_row(tid, random_activations(rng, 8, n)), n)
            calls = 1 if stream else CALLS
            if stream:   # the GGUF-layout one-token product (quants-avx2.cpp) on the same weights: the bar to reach
                wq, xq = np.ascontiguousarray(np.tile(base, (rows // 64, 1))), K.quantize_act_row(tid, random_activations(rng, 1, n))
                out[f"{name} n={n} 1 tok GGUF"] = rows * n / best(lambda a=(tid, wq, xq[0], n): K.matvec(*a), 5) / 1e9
                del wq
            for nt in (1, 4) if stream else (1, 4, 8):
                def run(args=(tid, pw, rows, xp[:nt], n), calls=calls):
                    for _ in range(calls):
                        K.matmul_packed(*args)
                out[f"{name} n={n} {nt} tok"] = nt * rows * n * calls / best(run, 5 if stream else 15) / 1e9
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="*", help="_engine .so files; the first is the baseline")
    ap.add_argument("--types", default="Q4_1,Q8_0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stream", action="store_true", help="96 MiB of weights from memory (else 0.5 MiB in L2)")
    ap.add_argument("--per-round", action="store_true", help="also each round's ratios of the later builds to the first")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.types, args.stream)))
        return
    if not args.builds:
        ap.error("give one or more _engine .so files")
    runs = alternate(__file__, args.builds, args.rounds, ["--types", args.types] + (["--stream"] if args.stream else []))
    print_best(f"GMAC/s, best of {args.rounds} alternated rounds ({'96 MiB streamed' if args.stream else '0.5 MiB in L2'}):",
               args.builds, runs, 22, "7.1f")
    if args.per_round:
        print_rounds(args.builds, runs, 22)


if __name__ == "__main__":
    main()
