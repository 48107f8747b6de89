"""Micro-benchmark of the quantized kernels (strata._engine.kernels) on one thread.

Prints, per weight type: matvec GB/s of weights streamed from memory (decode) for rows of 576
and 1536 elements (SmolLM2-135M's n_embd and n_ff), the scalar reference's GB/s, the
batched-decode gain (one matmul over 4 tokens vs 4 matvecs, weights read once, n=576), and matmul
GMAC/s for a 512-token prefill (ffn_up's shape, 1536 rows x 576) against 512 separate matvecs. The physical limits
come first: a plain read of a large buffer and memcpy (GB/s), and the int8 dot-instruction peak
(VNNI dpbusd, or AVX2 maddubs) on registers.

Times are CPU seconds of this process (time.process_time), best of several runs, so that other
work on a shared machine does not count; the kernels are single-threaded. Not a test: nothing is
asserted. Usage: .venv/bin/python benchmarks/kernels.py [--types Q4_1,Q8_0] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.native.kernel_data import (  # noqa: E402
    BLOCK,
    TYPE_IDS,
    WEIGHT_TYPES,
    K,
    random_activations,
    random_weights,
)

N_SHORT, N_LONG = 576, 1536   # row lengths: SmolLM2-135M's n_embd and n_ff
N_SHORT_K = 512                # K-quants need multiples of 256: 512 stands in for 576
STREAM_BYTES = 96 << 20        # weights for the streaming figures: 3x this machine's 32 MiB L3
PREFILL_ROWS = 1536            # ffn_up of the default model: 1536 rows x 576
PREFILL_TOKENS = 512


def best(fn, reps: int) -> float:
    """Smallest CPU time of reps calls of fn (one warm-up call first)."""
    fn()
    out = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        out = min(out, time.process_time() - t0)
    return max(out, 1e-9)


def limits() -> dict:
    buf = np.ones(256 << 20, dtype=np.uint8)
    dst = np.empty_like(buf)
    read = buf.nbytes / best(lambda: K.stream_read(buf), 3) / 1e9
    copy = 2 * buf.nbytes / best(lambda: np.copyto(dst, buf), 3) / 1e9   # read + write
    n_iter = 20_000_000
    macs, secs = min((K.int8_peak_probe(n_iter) for _ in range(3)), key=lambda ms: ms[1])
    peak = macs / secs / 1e9 if secs > 0 else 0.0
    return {"simd": K.simd_name(), "read_gbs": read, "memcpy_gbs": copy, "int8_peak_gmacs": peak}


def streaming_weights(rng: np.random.Generator, name: str, n: int) -> np.ndarray:
    """About STREAM_BYTES of `name` rows of n elements (1024 random rows repeated)."""
    n_rows = STREAM_BYTES // K.type_row_bytes(TYPE_IDS[name], n) // 1024 * 1024
    return np.tile(random_weights(rng, name, 1024, n), (n_rows // 1024, 1))


def bench_type(name: str, rng: np.random.Generator) -> dict:
    tid = TYPE_IDS[name]
    short = N_SHORT_K if name.endswith("_K") or BLOCK[name] == 256 else N_SHORT
    out: dict = {"type": name, "n_short": short}

    def timed_matvec(w, xq, n):
        return best(lambda: K.matvec(tid, w, xq[0], n), 5)

    for n in (short, N_LONG):
        w = streaming_weights(rng, name, n)
        xq = K.quantize_act_row(tid, random_activations(rng, 4, n))
        t_mv = timed_matvec(w, xq, n)
        out["matvec_gbs_short" if n == short else "matvec_gbs_long"] = w.nbytes / t_mv / 1e9
        if n == short:
            w_small = w[: w.shape[0] // 32]
            t_gen = best(lambda w_small=w_small, xq=xq, n=n: K.matvec_generic(tid, w_small, xq[0], n), 1)
            out["generic_gbs"] = w_small.nbytes / t_gen / 1e9
            out["batch4_gain"] = 4 * t_mv / best(lambda w=w, xq=xq, n=n: K.matmul(tid, w, xq, n), 3)
        del w

    w_pre = random_weights(rng, name, PREFILL_ROWS, short)
    xq = K.quantize_act_row(tid, random_activations(rng, PREFILL_TOKENS, short))
    t_mm = best(lambda: K.matmul(tid, w_pre, xq, short), 3)
    t_mvs = best(lambda: [K.matvec(tid, w_pre, xq[t], short) for t in range(PREFILL_TOKENS)], 2)
    macs = PREFILL_ROWS * short * PREFILL_TOKENS
    out["matmul_gmacs"] = macs / t_mm / 1e9
    out["matvecs_gmacs"] = macs / t_mvs / 1e9
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default=",".join(WEIGHT_TYPES), help="comma-separated GGUF type names")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    names = [t.strip() for t in args.types.split(",") if t.strip()]
    unknown = [t for t in names if t not in WEIGHT_TYPES]
    if unknown:
        parser.error(f"unknown types {unknown}; choose from {WEIGHT_TYPES}")
    rng = np.random.default_rng(0)
    lim = limits()
    rows = [bench_type(t, rng) for t in names]
    if args.json:
        print(json.dumps({"limits": lim, "types": rows}, indent=1))
        return 0
    print(f"simd {lim['simd']}: read {lim['read_gbs']:.1f} GB/s, memcpy {lim['memcpy_gbs']:.1f} GB/s (read+write), "
          f"int8 dot peak {lim['int8_peak_gmacs']:.0f} GMAC/s (one thread, CPU time)")
    print(f"matvec: {STREAM_BYTES >> 20} MiB of weights, short rows n={N_SHORT} ({N_SHORT_K} for K-quants), long "
          f"n={N_LONG}; batch4 and prefill on short rows; prefill: {PREFILL_ROWS} rows, {PREFILL_TOKENS} tokens")
    print(f"{'type':6} {'mv GB/s short':>13} {'mv GB/s long':>12} {'generic':>8} {'batch4 x':>8} "
          f"{'matmul GMAC/s':>13} {'512 matvecs':>11} {'mm/mv':>6}")
    for r in rows:
        print(f"{r['type']:6} {r['matvec_gbs_short']:13.1f} {r['matvec_gbs_long']:12.1f} {r['generic_gbs']:8.2f} "
              f"{r['batch4_gain']:8.2f} {r['matmul_gmacs']:13.1f} {r['matvecs_gmacs']:11.1f} "
              f"{r['matmul_gmacs'] / r['matvecs_gmacs']:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
