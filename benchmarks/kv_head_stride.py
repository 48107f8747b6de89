"""The cost of interleaved kv heads: the same attention work over the same bytes of KV with one kv head
against three, on tiny generated models, 1 thread: ms a decode step and the KV read rate. The
measurement behind the engine's head-major KV (RESULTS.md, "Head-major KV (session 5)"): with heads
interleaved in each row (the layout before), three heads read at less than half the rate of one;
with head-major KV the two rates are close.

    .venv/bin/python benchmarks/kv_head_stride.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from strata.engine import Engine  # noqa: E402

from tests.fixtures.tiny_gguf import make_tiny_gguf  # noqa: E402

# name: (n_embd, n_head, n_head_kv, history, layers): the pairs hold the same KV bytes and work
CASES = {"1 kv head, 24,576 positions": (192, 3, 1, 24576, 12), "3 kv heads, 8,192 positions": (576, 9, 3, 8192, 12)}


def best_step(e: Engine, toks: list[int], n: int) -> float:
    best = float("inf")
    for _ in range(5):
        e.truncate(0, n)
        t0 = time.perf_counter()
        for t in toks[n : n + 16]:
            e.decode([0], [t])
        best = min(best, (time.perf_counter() - t0) / 16)
    return best


def main() -> int:
    folder = Path(tempfile.mkdtemp())
    for i, (name, (n_embd, n_head, n_head_kv, history, n_layer)) in enumerate(CASES.items()):
        path = make_tiny_gguf(folder / f"stride-{i}.gguf", n_layer=n_layer, n_embd=n_embd, n_head=n_head,
                              n_head_kv=n_head_kv, n_ff=64, ctx_len=history + 64)
        e = Engine(str(path), n_ctx=history + 64, n_threads=1)
        toks = [int(t) for t in np.random.default_rng(0).integers(1, 500, history + 16)]
        e.prefill(0, toks[:history])
        # the step at this history less the step at 16 positions: the attention's own time (the
        # two models' weights differ in size)
        step = {n: best_step(e, toks, n) for n in (history, 16)}
        attention = step[history] - step[16]
        mb = n_layer * history * n_head_kv * (n_embd // n_head) * 2 * 2 / 1e6
        print(f"{name}: {step[history] * 1000:.3f} ms a step, {step[16] * 1000:.3f} at 16 positions; attention "
              f"{attention * 1000:.3f} ms for {mb:.0f} MB of KV, {mb / 1e3 / attention:.1f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
