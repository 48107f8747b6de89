"""Micro-benchmark of the row-interleaved ("packed") Q4_1 / Q8_0 / IQ4_NL / Q4_K / Q5_K / Q6_K / Q3_K / Q2_K /
IQ4_XS products (quants-packed.h)
against the GGUF-layout products they replace in the engine, on one thread.

Per type and row length (576, 1536: SmolLM2-135M's n_embd and n_ff; for the K-quants, whose rows are
whole super-blocks of 256, 2048 and 5632: a 7B-class n_embd and n_ff): GB/s of weights streamed
from memory at 1 token (decode; 96 MiB of weights, 3x this machine's L3) and GMAC/s at 4 tokens
over the same streamed weights (batched decode), GMAC/s at 4 and 8 tokens with the weights in L2
(about 0.5 MiB of weights, compute-bound), a 512-token prefill (ffn_up's shape; Q6_K: ffn_down's), the
packing speed (MB/s of GGUF weights packed), and for Q4_1 / Q8_0 / IQ4_NL the activation rows quantized and
prepared a second (millions; quantize_act_row then prepare_act_packed -> quantize_act_packed, the engine's path).

Times are CPU seconds of this process (time.process_time), best of several runs; the kernels are
single-threaded. Not a test: nothing is asserted. Usage:
.venv/bin/python benchmarks/packed_kernels.py [--types Q4_1,Q8_0,Q4_K,Q5_K,Q6_K,Q3_K,IQ4_XS,IQ4_NL,Q2_K] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.kernels import best  # noqa: E402
from tests.native.kernel_data import TYPE_IDS, K, random_activations, random_weights  # noqa: E402

STREAM_BYTES = 96 << 20   # streamed weights: 3x the 32 MiB L3
L2_ROWS = {576: 1536, 1536: 576, 2048: 448, 5632: 160}   # rows of about 0.5 MiB at each row length
SUPER_BLOCK_TYPES = ("Q4_K", "Q5_K", "Q6_K", "Q3_K", "Q2_K", "IQ4_XS")
ROW_LENGTHS = {t: (2048, 5632) for t in SUPER_BLOCK_TYPES}   # others: (576, 1536)
# (rows, n) of ffn_up (Q6_K: ffn_down, the matrix Q4_K_M files keep in Q6_K); others: (1536, 576)
ACT_TYPES = ("Q4_1", "Q8_0", "IQ4_NL")   # quantize_act_row + prepare_act_packed -> quantize_act_packed
PREFILL_SHAPE = {**{t: (5632, 2048) for t in SUPER_BLOCK_TYPES}, "Q6_K": (2048, 5632)}


def rate(work: float, fn, *args, reps: int = 3) -> float:
    """work / the best CPU seconds of fn(*args), in units of 1e9."""
    return work / best(lambda: fn(*args), reps) / 1e9


def weights(rng, name: str, n_rows: int, n: int) -> np.ndarray:
    """(n_rows, row_bytes) GGUF rows: a random 64-row block tiled (quantizing 96 MiB is slow)."""
    base = random_weights(rng, name, 64, n)
    return np.ascontiguousarray(np.tile(base, (n_rows // 64, 1)))


def measure(name: str, rng) -> dict:
    tid = TYPE_IDS[name]
    out: dict = {}
    for n in ROW_LENGTHS.get(name, (576, 1536)):
        row_bytes = K.type_row_bytes(tid, n)
        n_rows = STREAM_BYTES // row_bytes // 64 * 64
        w = weights(rng, name, n_rows, n)
        t_pack = best(lambda: K.pack_rows(tid, w, n), 2)  # noqa: B023 (called right here)
        pw = K.pack_rows(tid, w, n)
        xq = K.quantize_act_row(tid, random_activations(rng, 8, n))
        xp = K.prepare_act_packed(tid, xq, n)
        macs = n_rows * n
        out[f"pack_mbs_{n}"] = w.nbytes / t_pack / 1e6
        out[f"decode_gbs_{n}"] = (rate(w.nbytes, K.matvec, tid, w, xq[0], n),
                                  rate(w.nbytes, K.matmul_packed, tid, pw, n_rows, xp[:1], n))
        out[f"batch4_stream_gmacs_{n}"] = (rate(4 * macs, K.matmul, tid, w, xq[:4], n),
                                           rate(4 * macs, K.matmul_packed, tid, pw, n_rows, xp[:4], n))
        if name in ACT_TYPES:   # 64 rows a call, in L2 as the engine's few rows a step
            xa = random_activations(rng, 64, n)
            out[f"act_mrows_s_{n}"] = (rate(64e3, lambda: K.prepare_act_packed(tid, K.quantize_act_row(tid, xa), n), reps=20),  # noqa: B023
                                       rate(64e3, K.quantize_act_packed, tid, xa, reps=20))
        rows = L2_ROWS[n]
        wl, pl = w[:rows], K.pack_rows(tid, w[:rows], n)
        for nt in (4, 8):
            out[f"l2_{nt}tok_gmacs_{n}"] = (rate(nt * rows * n, K.matmul, tid, wl, xq[:nt], n, reps=20),
                                            rate(nt * rows * n, K.matmul_packed, tid, pl, rows, xp[:nt], n, reps=20))
    rows, n = PREFILL_SHAPE.get(name, (1536, 576))
    w = weights(rng, name, rows, n)
    pw = K.pack_rows(tid, w, n)
    xq = K.quantize_act_row(tid, random_activations(rng, 512, n))
    xp = K.prepare_act_packed(tid, xq, n)
    macs = 512 * rows * n
    out["prefill512_gmacs"] = (rate(macs, K.matmul, tid, w, xq, n), rate(macs, K.matmul_packed, tid, pw, rows, xp, n))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="Q4_1,Q8_0,Q4_K,Q5_K,Q6_K")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    results = {}
    for name in args.types.split(","):
        if not K.packed_supported(TYPE_IDS[name]):
            sys.exit(f"no packed products for {name} in this {K.simd_name()} build")
        results[name] = measure(name, rng)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"{K.simd_name()}: GGUF layout -> packed (one thread, CPU time)")
    for name, r in results.items():
        for key, v in r.items():
            text = f"{v[0]:7.1f} -> {v[1]:7.1f}  x{v[1] / v[0]:.2f}" if isinstance(v, tuple) else f"{v:7.0f}"
            print(f"{name:5s} {key:24s} {text}")


if __name__ == "__main__":
    main()
