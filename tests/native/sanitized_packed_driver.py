"""Run by test_kernels_packed_sanitized.py in a subprocess with ASan preloaded: the packed products of a
kernels module built with -fsanitize=address,undefined (argv[1]: its file), for the packed types argv[2]
(comma separated), on exactly sized fresh buffers (a packed matrix, its prepared activations, each token
slice copied), so a read past a buffer's end or undefined behaviour stops the process with the
sanitizer's report; each result compared with this venv's engine bit for bit. Shapes: every n_rows 1..40
and 53 (padded last groups), two row lengths (the K-quants: 1 and 3 super-blocks), 1..19 tokens (tiles of
1..8 and remainders), row ranges from every group boundary ending one row in, at 8, 9 and the end; rows
with NaN, inf and subnormal values among them. Prints 'ok N products'."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

from .kernel_data import TYPE_IDS, K, random_activations, random_weights


def load(path: str):
    spec = importlib.util.spec_from_file_location("_kernels_avx2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernels


def main(path: str, names: list[str]) -> int:
    san = load(path)
    rng = np.random.default_rng(37)
    calls = 0
    for name in names:
        tid = TYPE_IDS[name]
        assert san.packed_supported(tid), name
        for n in ((256, 768) if name.endswith("_K") else (64, 96)):
            for n_rows in [*range(1, 41), 53]:
                w = random_weights(rng, name, n_rows, n)
                x = random_activations(rng, 19, n)
                if n_rows == 7:
                    x[3, 5], x[5, 9] = np.nan, np.inf
                    x[4, :] = 1e-40
                pw = san.pack_rows(tid, w.copy(), n).copy()
                xp = san.prepare_act_packed(tid, san.quantize_act_row(tid, x), n)
                want = K.matmul_packed(tid, K.pack_rows(tid, w, n), n_rows,
                                       K.prepare_act_packed(tid, K.quantize_act_row(tid, x), n), n)
                for n_tok in (1, 2, 7, 8, 9, 19):
                    xs = xp[:n_tok].copy()
                    for r0 in range(0, n_rows, 16):
                        for r1 in sorted({r0 + 1, min(n_rows, r0 + 8), min(n_rows, r0 + 9), n_rows}):
                            got = san.matmul_packed(tid, pw, n_rows, xs, n, r0, r1)
                            calls += 1
                            if not np.array_equal(got, want[:n_tok, r0:r1], equal_nan=True):
                                print(f"differs: {name} n={n} n_rows={n_rows} n_tok={n_tok} [{r0}, {r1})")
                                return 1
    print(f"ok {calls} products")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2].split(",")))
