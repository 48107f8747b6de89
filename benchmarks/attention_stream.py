"""One decode row's attention over one kv head (attention_group, f16 KV (--kv-type q8_0: q8_0), SmolLM2-135M's heads: 3 query heads
a kv head, 64 dims; --rep / --head-dim for other models' shapes, e.g. --rep 4 --head-dim 128 Llama 3 8B's) with the KV in cache against the KV streamed from memory, as a batched decode step
reads it (the weights streamed between two steps evict every context's KV from L3).

Per build and --positions: microseconds a call, one thread, CPU time, best of --rounds; "cached" calls
one kv head's KV again and again, "streamed" walks 96 MiB of them (3x this VM's L3), each in a layout of
one kv head as the engine keeps them (head-major: a kv head's K tiles and V rows contiguous), and
"streamed, 3 kv heads" the same bytes in layouts of 3 kv heads (each head a third of every K tile and V
row: the engine does not read KV so). Includes the Python call (about 1 us). Not a test (no assertion).

    .venv/bin/python benchmarks/attention_stream.py [BUILD.so ...] [--positions 400] [--kv-type q8_0] [--rep 3]
        [--head-dim 64]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

HEAD_DIM, N_REP = 64, 3   # defaults: SmolLM2-135M's
HEAD_DIMS = (32, 64, 128)   # the q8_0 kernels' whole-head sizes
KV_TYPES = {"f16": (1, 2.0), "q8_0": (8, 34 / 32)}   # the engine's type id, bytes per element
STREAM_BYTES = 96 << 20


def worker(so: str, positions: int, rounds: int, kv_type: str = "f16", n_rep: int = N_REP,
           head_dim: int = HEAD_DIM) -> str:
    kv, elem_bytes = KV_TYPES[kv_type]
    if so != "installed":
        from kv_types import load_engine_from

        load_engine_from(so)
    import numpy as np
    import strata._engine as native

    k_ = native.kernels
    rng = np.random.default_rng(0)
    q = rng.standard_normal((n_rep, head_dim)).astype(np.float32)

    def layouts(n_kv: int, count: int) -> list:
        out = []
        for _ in range(count):
            k = rng.standard_normal((positions, n_kv * head_dim)).astype(np.float32)
            v = rng.standard_normal((positions, n_kv * head_dim)).astype(np.float32)
            out.append(k_.kv_pack(kv, n_kv, head_dim, k, v))
        return out

    def per_call(bufs: list, n_kv: int, calls: int) -> float:
        best = float("inf")
        for _ in range(rounds):
            t0 = time.process_time()
            done = 0
            while done < calls:
                for kp, vp in bufs:
                    for g in range(n_kv):
                        k_.attention_group(kv, n_kv, head_dim, kp, vp, q, g, positions, 0.125, 0, None, False)
                    done += n_kv
            best = min(best, (time.process_time() - t0) / done)
        return best * 1e6

    per_head = int(positions * head_dim * elem_bytes * 2)   # K and V
    n3 = max(1, STREAM_BYTES // (3 * per_head))
    cached = per_call(layouts(1, 1), 1, 600)
    streamed = per_call(layouts(1, 3 * n3), 1, 3 * n3)
    streamed3 = per_call(layouts(3, n3), 3, 3 * n3)
    return (f"cached {cached:.2f} us, streamed {streamed:.2f} us ({per_head / streamed / 1e3:.1f} GB/s), "
            f"streamed, 3 kv heads {streamed3:.2f} us")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="*", default=["installed"], help="_engine .so files (or 'installed')")
    ap.add_argument("--positions", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kv-type", default="f16", choices=tuple(KV_TYPES), help="the KV's element type")
    ap.add_argument("--rep", type=int, default=N_REP, help="query heads a kv head (default %(default)s)")
    ap.add_argument("--head-dim", type=int, default=HEAD_DIM, help="dimensions a head: 32, 64 or 128 (default %(default)s)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.positions < 1 or args.rounds < 1:
        ap.error("--positions and --rounds must be at least 1")
    if not 1 <= args.rep <= 64:
        ap.error(f"--rep must be 1-64 (the engine's most query heads a kv head), not {args.rep}")
    if args.head_dim not in HEAD_DIMS:
        ap.error(f"--head-dim must be one of {HEAD_DIMS}, not {args.head_dim}")
    for so in args.builds:
        if so != "installed" and not Path(so).is_file():
            ap.error(f"no file {so}")
    if args.worker:
        print(worker(args.builds[0], args.positions, args.rounds, args.kv_type, args.rep, args.head_dim))
        return 0
    for so in args.builds:
        out = subprocess.run([sys.executable, __file__, "--worker", so, "--positions", str(args.positions), "--rounds",
                              str(args.rounds), "--kv-type", args.kv_type, "--rep", str(args.rep), "--head-dim",
                              str(args.head_dim)], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(out.stderr[-2000:])
        shape = f"rep {args.rep} head-dim {args.head_dim} "
        print(f"{Path(so).name} {args.kv_type} {shape}positions {args.positions}: {out.stdout.strip()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
