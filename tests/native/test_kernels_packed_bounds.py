"""The integer bounds the AVX2 packed products (quants-packed-avx2.cpp) rest on, reached on this build's
own kernels: Q4_1's 8 maddubs pair sums added in int16 (16 products of nibble 15 by -128 each: -30720,
by 127: 30480), and Q8_0's / IQ4_NL's sign trick at its largest pair sums (|w| 128 or 127 by 127:
32512, 32258). With every scale 1.0 the products are exact integers, so any int16 wrap or saturation
would show as a wrong integer. The AVX-512 packed products reach the same integers through vpdpbusd.

The sign trick is wrong for an activation byte of -128 under a negative weight (its negation wraps);
the kernels rely on the activation quantizer giving -128 only in blocks whose scale is 0 (the block
adds 0) or not finite (the row is garbage anyway): the last test holds the quantizer to that."""

from __future__ import annotations

import numpy as np
import pytest

from .kernel_data import TYPE_IDS, K

N = 64            # two blocks of 32
ROWS = 24         # a whole group and a masked half of the next
ONE = np.array([1.0], "<f2").view(np.uint8)

packed_only = pytest.mark.skipif(not K.packed_supported(TYPE_IDS["Q4_1"]),
                                 reason=f"no packed products in this {K.simd_name()} build")


def weights(name: str, quant_bytes: np.ndarray) -> np.ndarray:
    """(ROWS, row bytes) GGUF rows: every block d = 1.0 (Q4_1: m = 0), its quant bytes `quant_bytes`."""
    head = 4 if name == "Q4_1" else 2
    blk = np.concatenate([ONE, np.zeros(head - 2, np.uint8), quant_bytes])
    return np.tile(blk, (ROWS, N // 32))


def activations(name: str, q: int) -> np.ndarray:
    """One row of N activation bytes q (Q8_1 for Q4_1, else Q8_0) with d = 1.0 (Q8_1: s = the sum)."""
    qs = np.full(32, q, np.int8).view(np.uint8)
    head = np.concatenate([ONE, np.array([32.0 * q], "<f2").view(np.uint8)]) if name == "Q4_1" else ONE
    return np.tile(np.concatenate([head, qs]), N // 32)[None, :]


@packed_only
@pytest.mark.parametrize("name, quant_byte, w_value, q", [
    ("Q4_1", 0xFF, 15, -128),     # int16 partial 16 * 15 * -128 = -30720
    ("Q4_1", 0xFF, 15, 127),      # 16 * 15 * 127 = 30480
    ("Q8_0", 0x80, -128, -127),   # pair sum 2 * 128 * 127 = 32512
    ("Q8_0", 0x80, -128, 127),    # -32512
    ("Q8_0", 0x7F, 127, -127),    # -32258
    ("IQ4_NL", 0x00, -127, -127),   # table index 0 (-127): 32258
    ("IQ4_NL", 0xFF, 113, 127),
])
def test_packed_products_exact_at_the_int16_bounds(name, quant_byte, w_value, q):
    tid = TYPE_IDS[name]
    n_quant = 32 if name == "Q8_0" else 16
    w = weights(name, np.full(n_quant, quant_byte, np.uint8))
    xq = activations(name, q)
    got = K.matmul_packed(tid, K.pack_rows(tid, w, N), ROWS, K.prepare_act_packed(tid, xq, N), N)[0]
    exact = np.float32(N * w_value * q)
    assert (got == exact).all(), (got, exact)
    assert (K.matvec_generic(tid, w, xq[0], N) == exact).all()


@pytest.mark.parametrize("name", ["Q8_0", "Q4_1"])
def test_activation_quantizer_gives_minus_128_only_where_the_block_adds_nothing(name):
    """Random rows over scales from 1e30 down to subnormal, each block's largest magnitude once negative:
    a quant of -128 appears only in blocks whose fp16 d is 0 (|x| below ~3.7e-37: 1 / d overflows) or
    not finite (|x| past 65504 * 127), never beside a finite, nonzero d."""
    tid, bb, qo = TYPE_IDS[name], (36 if name == "Q4_1" else 34), (4 if name == "Q4_1" else 2)
    rng = np.random.default_rng(5)
    rows = []
    with np.errstate(over="ignore"):
        for scale in (1e30, 1e6, 1.0, 1e-3, 1e-30, 4e-37, 3e-37, 1e-38, 1e-40):
            x = (rng.standard_normal(32 * 256) * scale).astype(np.float32)
            rows.append(x)
            y = x.copy().reshape(-1, 32)
            y[:, 0] = -np.abs(y).max(1)   # the block's largest magnitude, negative
            rows.append(y.reshape(-1))
    xq = K.quantize_act_row(tid, np.stack(rows)).reshape(len(rows), -1, bb)
    d = xq[..., :2].copy().view("<f2")[..., 0]
    minus_128 = (xq[..., qo:qo + 32].view(np.int8) == -128).any(-1)
    assert minus_128.any()   # the scales reach both cases
    assert not (minus_128 & np.isfinite(d) & (d != 0)).any()
