"""Run by test_attention_window.py in a child process (a bad read kills it with SIGSEGV, not pytest):
windowed attention over K and V buffers whose bytes before the window lie in pages mapped PROT_NONE,
so that any read of them (not a prefetch, which does not fault) ends the process. For each case it
checks that attention_group row by row and attention_row_group give bitwise what they give over
ordinary buffers, and prints "ok <cases>". Linux (and other POSIX) only: mmap + mprotect.

Usage: python attention_guarded_read.py '<JSON list of [kv_type, head_dim, n_head_kv, window, [n_pos...]]>'
"""

from __future__ import annotations

import ctypes
import json
import mmap
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.native.attention_reference import Q8_0, K, make_kv, window_start  # noqa: E402

PAGE = mmap.PAGESIZE
PROT_NONE = 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_keep: list[mmap.mmap] = []   # the mappings live as long as the process


def guarded_copy(buf: np.ndarray, n_unreadable: int) -> np.ndarray:
    """A copy of buf whose first n_unreadable bytes (whole pages of them) cannot be read."""
    lead = -(-n_unreadable // PAGE) * PAGE        # the protected pages end where the readable bytes start
    start = lead - n_unreadable
    mm = mmap.mmap(-1, lead + buf.nbytes + PAGE)
    _keep.append(mm)
    whole = np.frombuffer(mm, dtype=np.uint8)
    whole[start:start + buf.nbytes] = buf
    if lead and _libc.mprotect(whole.ctypes.data, lead, PROT_NONE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    return whole[start:start + buf.nbytes]


def run_case(kv_type: int, head_dim: int, n_head_kv: int, window: int, n_pos: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    case = make_kv(rng, kv_type, n_head_kv, head_dim, max(n_pos))
    layout = case.layout()
    n_rep = 3
    tiled = kv_type == Q8_0 or head_dim % 16 == 0
    w0 = min(window_start(p, window) for p in n_pos)
    first_k = w0 // 16 * 16 if tiled else w0              # K is read from the window's first tile
    row_bytes = K.kv_rows(*layout, case.v_buf, False, 0, 1).shape[1]
    k_g = guarded_copy(case.k_buf, first_k * row_bytes)
    v_g = guarded_copy(case.v_buf, w0 * row_bytes)
    q = rng.standard_normal((len(n_pos), n_rep, head_dim)).astype(np.float32)
    sinks = rng.standard_normal(n_rep).astype(np.float32)
    for g in range(n_head_kv):
        want = K.attention_row_group(*layout, case.k_buf, case.v_buf, q, g, n_pos, 0.125, window, sinks)
        got = K.attention_row_group(*layout, k_g, v_g, q, g, n_pos, 0.125, window, sinks)
        assert np.array_equal(want, got), (layout, window, n_pos)
        for i, p in enumerate(n_pos):
            one = K.attention_group(*layout, k_g, v_g, q[i], g, p, 0.125, window, sinks)
            assert np.array_equal(one, want[i]), (layout, window, p)


def main() -> None:
    cases = json.loads(sys.argv[1])
    for i, (kv_type, head_dim, n_head_kv, window, n_pos) in enumerate(cases):
        run_case(kv_type, head_dim, n_head_kv, window, n_pos, seed=i)
    print(f"ok {len(cases)}")


if __name__ == "__main__":
    main()
