"""MXFP4 (GGML type 39, gpt-oss's expert weights): the block decode against a NumPy implementation of
the format and against gguf's dequantize for every E8M0 exponent, the dot product against float64
sums, the build's fast product against the scalar one, matmul == matvec bit for bit at gpt-oss's
width (2880 = 90 blocks, not a multiple of 128), the type table, and that nothing packs MXFP4.

The shared parametrized kernel tests (test_kernels_products.py, test_kernels_formats.py, the AVX2
build) run MXFP4 too through kernel_data.WEIGHT_TYPES; this file adds what is particular to it.
Not here: the expert routing or the gpt-oss forward pass (tests/engine).
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants

from .kernel_data import K, act_values, random_activations

MXFP4 = 39
Q8_0 = 8
BLOCK_BYTES = 17
KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)
WIDTHS = (32, 96, 160, 2880)   # 1, 3, 5 blocks (partial SIMD steps) and gpt-oss's 90
N_ROWS = 37                    # odd, so row tiles of every width leave remainders


def e8m0_half(e: np.ndarray) -> np.ndarray:
    """float32 2^(e - 128) for uint8 e, built from its value (not from ggml's bit patterns)."""
    return np.ldexp(np.float64(1), e.astype(np.int64) - 128).astype(np.float32)


def dequantize_numpy(blocks: np.ndarray) -> np.ndarray:
    """(n_blocks, 17) uint8 -> (n_blocks, 32) float32: element j < 16 from qs[j]'s low nibble,
    j + 16 from its high nibble, value KVALUES[nibble] * 2^(e - 128)."""
    e, qs = blocks[:, 0], blocks[:, 1:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1)
    with np.errstate(over="ignore"):   # 12 * 2^127 is inf in float32, as in C
        return KVALUES[q].astype(np.float32) * e8m0_half(e)[:, None]


def random_blocks(rng: np.random.Generator, n_blocks: int, e_lo: int, e_hi: int) -> np.ndarray:
    """(n_blocks, 17) uint8: exponents uniform in [e_lo, e_hi], every nibble pattern (8: -0)."""
    b = rng.integers(0, 256, size=(n_blocks, BLOCK_BYTES), dtype=np.uint8)
    b[:, 0] = rng.integers(e_lo, e_hi + 1, size=n_blocks)
    return b


def weights(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    """(N_ROWS, n / 32 * 17) uint8 rows: quantized by gguf ("gguf") or random raw blocks ("raw",
    exponents 110..140 so that no product overflows)."""
    if kind == "gguf":
        scale = np.exp(rng.uniform(-3, 1, size=(N_ROWS, 1)))
        return np.ascontiguousarray(quants.quantize((rng.standard_normal((N_ROWS, n)) * scale).astype(np.float32), T.MXFP4))
    return random_blocks(rng, N_ROWS * n // 32, 110, 140).reshape(N_ROWS, -1)


# ---------------------------------------------------------------- decode


def test_dequantize_every_exponent_matches_numpy_and_gguf():
    """One block per E8M0 value 0..255 (0 and 1 decode to float denormals, 255 to 2^127 with 12 *
    2^127 = inf), each holding all 16 nibbles in both halves: the kernel, gguf and the NumPy format
    agree bit for bit."""
    b = np.zeros((256, BLOCK_BYTES), dtype=np.uint8)
    b[:, 0] = np.arange(256)
    nib = np.arange(16, dtype=np.uint8)
    b[:, 1:] = nib | (nib[::-1] << 4)            # low nibbles 0..15, high nibbles 15..0
    want = dequantize_numpy(b)
    got = K.dequantize_row(MXFP4, b.reshape(-1), 256 * 32).reshape(256, 32)
    with np.errstate(over="ignore"):
        from_gguf = quants.dequantize(b, T.MXFP4).reshape(256, 32).astype(np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(from_gguf, want)
    # the scale is 2^(e - 128) exactly: nibble 1 (value 1) at element 1, -12 (nibble 15) at 15
    assert got[0, 1] == np.float32(2.0**-128) and got[1, 1] == np.float32(2.0**-127)
    assert got[2, 1] == np.float32(2.0**-126) and got[128, 1] == 1.0 and got[254, 1] == np.float32(2.0**126)
    assert got[128, 15] == -12.0 and got[128, 16] == -12.0 and np.isinf(got[255, 15])
    assert np.signbit(got[128, 8]) == np.signbit(np.float32(0))   # nibble 8 ("-0") decodes as +0, as ggml's int8 table


@pytest.mark.parametrize("n", WIDTHS)
def test_dequantize_random_rows_match_gguf(n):
    rng = np.random.default_rng(n)
    for kind in ("gguf", "raw"):
        w = weights(rng, n, kind)
        got = np.stack([K.dequantize_row(MXFP4, w[r], n) for r in range(N_ROWS)])
        assert np.array_equal(got, quants.dequantize(w, T.MXFP4).astype(np.float32)), kind
        assert np.array_equal(got, dequantize_numpy(w.reshape(-1, BLOCK_BYTES)).reshape(N_ROWS, n)), kind


# ---------------------------------------------------------------- products


def _case(n: int, kind: str, seed: int):
    rng = np.random.default_rng(seed)
    w = weights(rng, n, kind)
    xq = K.quantize_act_row(MXFP4, random_activations(rng, 9, n))
    true_w = dequantize_numpy(w.reshape(-1, BLOCK_BYTES)).reshape(N_ROWS, n).astype(np.float64)
    return w, xq, true_w


@pytest.mark.parametrize("kind", ["gguf", "raw"])
@pytest.mark.parametrize("n", WIDTHS)
def test_generic_and_fast_dot_match_float64(n, kind):
    """The scalar dot (ggml's integer block sums times fp16(x.d) * e8m0_half(e)) and the build's
    fast matvec equal the float64 sum of the decoded values times the activation values within
    float32 rounding: 1e-5 of sum |w x| (what the other types' tests allow)."""
    w, xq, true_w = _case(n, kind, 7 * n + len(kind))
    for t in range(3):
        x = act_values("Q8_0", xq[t])
        want = true_w @ x
        tol = 1e-5 * (np.abs(true_w) @ np.abs(x)) + 1e-30
        generic = K.matvec_generic(MXFP4, w, xq[t], n).astype(np.float64)
        fast = K.matvec(MXFP4, w, xq[t], n).astype(np.float64)
        assert np.all(np.abs(generic - want) <= tol), (n, kind, t, np.abs(generic - want).max())
        assert np.all(np.abs(fast - generic) <= tol), (n, kind, t, np.abs(fast - generic).max())


def test_extreme_exponents_multiply_exactly():
    """Denormal scales (e = 0, 1, 2) and large ones (e = 200), one block at a time. The activations
    are integers times 2^-3, so Q8_0's d is 2^-3 and every partial sum is an integer times a power of
    two: exact in float32 in any order, so generic and fast equal the float64 value."""
    rng = np.random.default_rng(3)
    b = random_blocks(rng, 8, 0, 0)
    b[:, 0] = [0, 1, 2, 3, 126, 128, 130, 200]
    ints = rng.integers(-127, 128, size=32)
    ints[5] = 127
    xq = K.quantize_act_row(MXFP4, (ints * 0.125).astype(np.float32))
    assert xq[:2].view("<f2")[0] == 0.125
    x = act_values("Q8_0", xq)
    for i in range(8):
        want = dequantize_numpy(b[i:i + 1]).astype(np.float64)[0] @ x
        assert np.float64(np.float32(want)) == want, i
        assert K.matvec_generic(MXFP4, b[i:i + 1], xq, 32)[0] == want, i
        assert K.matvec(MXFP4, b[i:i + 1], xq, 32)[0] == want, i


@pytest.mark.parametrize("n", [128, 160])
def test_every_exponent_through_the_fast_product(n):
    """Rows whose blocks carry E8M0 values 0..239 in turn (n = 128: whole SIMD steps; 160: a partial
    one too), against integer activations times 2^-3: every partial sum is an integer multiple of the
    row's smallest scale below 2^24, so generic and fast are exact. (Above 239 lane sums overflow.)"""
    rng = np.random.default_rng(n)
    n_blocks = n // 32
    e = np.arange(0, 240 - 240 % n_blocks)
    b = random_blocks(rng, len(e), 0, 0)
    b[:, 0] = e
    w = b.reshape(-1, n_blocks * BLOCK_BYTES)
    ints = rng.integers(-127, 128, size=n)
    ints[0] = 127
    xq = K.quantize_act_row(MXFP4, (ints * 0.125).astype(np.float32))
    want = dequantize_numpy(b).astype(np.float64).reshape(len(w), n) @ act_values("Q8_0", xq)
    assert np.array_equal(want.astype(np.float32).astype(np.float64), want)
    assert np.array_equal(K.matvec_generic(MXFP4, w, xq, n), want)
    assert np.array_equal(K.matvec(MXFP4, w, xq, n), want)


@pytest.mark.parametrize("n", [128, 160])
def test_all_256_exponents_scale_the_fast_product(n):
    """One weight of value 1 per block (the rest 0) against an activation of 2^-10: each block adds
    exactly 2^(e - 138), so even e = 255 stays finite and each product names its scale exactly."""
    n_blocks = n // 32
    b = np.zeros((256 + (-256) % n_blocks, BLOCK_BYTES), dtype=np.uint8)
    b[:256, 0] = np.arange(256)
    b[:, 1 + 3] = 0x01                                   # element 3: nibble 1 (value 1)
    w = b.reshape(-1, n_blocks * BLOCK_BYTES)
    x = np.zeros(n, dtype=np.float32)
    x[3::32] = 2.0**-10                                 # each block's element 3: q = 1 once d = 2^-10
    x[5::32] = 127 * 2.0**-10                           # its element 5 sets the block's amax: d = 2^-10 exactly
    xq = K.quantize_act_row(MXFP4, x)
    want = dequantize_numpy(b).astype(np.float64).reshape(len(w), n) @ act_values("Q8_0", xq)
    assert np.all(np.isfinite(want))
    assert np.array_equal(K.matvec_generic(MXFP4, w, xq, n), want.astype(np.float32))
    assert np.array_equal(K.matvec(MXFP4, w, xq, n), want.astype(np.float32))


@pytest.mark.parametrize("n", [160, 2880])
def test_matmul_equals_matvec_bitwise(n):
    """quants.h's rule at a partial last SIMD step (5 blocks) and at gpt-oss's 90 blocks."""
    w, xq, _ = _case(n, "gguf", 11 * n)
    single = np.stack([K.matvec(MXFP4, w, xq[t], n) for t in range(9)])
    for r0, r1 in [(0, N_ROWS), (3, 20), (5, 6), (1, N_ROWS - 1), (7, 7), (13, 30)]:
        for n_tok in range(1, 10):
            got = K.matmul(MXFP4, w, xq[:n_tok], n, r0, r1)
            assert got.shape == (n_tok, r1 - r0)
            assert np.array_equal(got, single[:n_tok, r0:r1]), (n, r0, r1, n_tok)
        assert np.array_equal(K.matvec(MXFP4, w, xq[4], n, r0, r1), single[4, r0:r1])


# ---------------------------------------------------------------- type table, packing


def test_type_table():
    assert K.type_name(MXFP4) == "MXFP4"
    assert K.type_supported(MXFP4)
    assert K.type_block_size(MXFP4) == 32
    assert K.type_row_bytes(MXFP4, 2880) == 90 * 17
    assert K.act_type_for(MXFP4) == Q8_0
    assert K.act_row_bytes(MXFP4, 2880) == 90 * 34


def test_bad_row_length_names_the_type():
    with pytest.raises(ValueError, match=r"n=48 must be a positive multiple of MXFP4's block size 32"):
        K.type_row_bytes(MXFP4, 48)
    with pytest.raises(ValueError, match=r"MXFP4"):
        K.matvec(MXFP4, np.zeros((2, 17), np.uint8), np.zeros(34, np.uint8), 40)


def test_mxfp4_is_never_packed():
    """Experts are read in place: the packed layout has no MXFP4, so the engine (which packs only
    what packed_supported accepts) keeps the in-place product; asking to pack it is a clear error."""
    assert not K.packed_supported(MXFP4)
    with pytest.raises(ValueError, match=r"no packed products for type MXFP4 \(39\)"):
        K.packed_bytes(MXFP4, 16, 2880)
