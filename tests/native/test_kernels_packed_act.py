"""Activations quantized straight into prepared packed rows (quantize_act_row_packed, the engine's path; on
AVX2 builds quants-packed-avx2.cpp's fused quantizer, 8 blocks at a time) give the bytes of the two steps
it replaces, quantize_act_row then prepare_act_row_packed: at every row length's tail of 1..8 blocks, over
scales from 1e30 down to subnormal (d = 0, 1 / d overflowing), with infinite and NaN elements, at exact .5
ties and signed zeros. Skipped in builds without packed products; an AVX-512 build has no fused quantizer
(it compares the two steps with themselves): test_kernels_avx2_build.py holds its AVX2 build to the same
cases (hard_rows)."""

from __future__ import annotations

import numpy as np
import pytest

from .kernel_data import TYPE_IDS, K, random_activations

pytestmark = pytest.mark.skipif(not K.packed_supported(TYPE_IDS["Q4_1"]),
                                reason=f"no packed products in this {K.simd_name()} build")

TYPES = ["Q4_1", "Q8_0", "IQ4_NL"]


def two_steps(tid: int, x: np.ndarray, k=K) -> np.ndarray:
    return k.prepare_act_packed(tid, k.quantize_act_row(tid, x), x.shape[1])


def extreme_rows() -> np.ndarray:
    """(6, 1536): each block at its own scale (a group of 8 blocks mixes them), its largest magnitude once
    negative; two infinite elements."""
    rng = np.random.default_rng(7)
    scales = np.array([1e30, 1e6, 1.0, 1e-3, 1e-30, 4e-37, 3e-37, 1e-38, 1e-40, 0.0, 65504.0 * 127, 1e5], np.float64)
    n_blocks = 48
    rows = []
    with np.errstate(over="ignore"):
        for _ in range(6):
            s = rng.choice(scales, n_blocks)
            x = (rng.standard_normal((n_blocks, 32)) * s[:, None]).astype(np.float32)
            neg = rng.random(n_blocks) < 0.5
            x[neg, 0] = -np.abs(x[neg]).max(1)
            rows.append(x.reshape(-1))
    x = np.stack(rows)
    x[1, 5 * 32 + 3] = np.inf
    x[2, 9 * 32 + 30] = -np.inf
    return x


def nan_rows() -> np.ndarray:
    """(512, 256): a NaN, then a -NaN, at each of a group of 8 blocks' 256 places. The amax's max
    instructions keep or drop a NaN by their operand order, so the fused reduction over 8 blocks must
    pair and order them as the per-block one (quants-avx2.cpp's hmax8)."""
    x = np.tile(random_activations(np.random.default_rng(3), 1, 8 * 32), (2 * 8 * 32, 1))
    for i in range(8 * 32):
        x[2 * i, i] = np.nan
        x[2 * i + 1, i] = -np.nan
    return x


def tie_rows() -> np.ndarray:
    """(1, 512): 8 blocks of amax 127 (d = 1: x / d is x) holding every k + 0.5 tie in [-126.5, 126.5]; 4
    blocks of -0.0, one of +0.0 with one -0.0, 3 of +0.0."""
    ties = np.arange(-126.5, 127.0, 1.0, dtype=np.float32)   # 254 ties
    blocks = np.zeros((16, 32), np.float32)
    blocks[:8, 0] = 127.0
    blocks[:8, 1:] = np.resize(ties, (8, 31))
    blocks[8:12] = -0.0
    blocks[12, 5] = -0.0
    return blocks.reshape(1, -1)


def hard_rows() -> dict[str, np.ndarray]:
    return {"extremes": extreme_rows(), "nan": nan_rows(), "ties": tie_rows()}


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("n", [32, 64, 96, 128, 160, 192, 224, 256, 288, 576, 1536])
def test_fused_equals_quantize_then_prepare(name, n):
    tid = TYPE_IDS[name]
    x = random_activations(np.random.default_rng(n), 5, n)
    got = K.quantize_act_packed(tid, x)
    assert got.shape == (5, n // 32 * 40)
    assert np.array_equal(got, two_steps(tid, x))


@pytest.mark.parametrize("name", TYPES)
def test_fused_writes_nothing_past_its_row(name):
    """Rows 8 blocks (320 bytes) apart more than their length, the gaps left as the binding's canary 0xA5:
    a group's blocks past the row's end (its tail of 1..8 blocks) are never stored."""
    tid = TYPE_IDS[name]
    for n in range(32, 32 * 17 + 1, 32):
        x = random_activations(np.random.default_rng(n), 3, n)
        prow = n // 32 * 40
        got = K.quantize_act_packed(tid, x, row_bytes=prow + 320)
        assert np.array_equal(got[:, :prow], two_steps(tid, x)), n
        assert (got[:, prow:] == 0xA5).all(), f"n={n}: bytes written past the row"


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("case", ["extremes", "nan", "ties"])
def test_fused_equals_two_steps_on_hard_rows(name, case):
    tid, x = TYPE_IDS[name], hard_rows()[case]
    got, want = K.quantize_act_packed(tid, x), two_steps(tid, x)
    assert np.array_equal(got, want), f"rows {np.flatnonzero((got != want).any(1))[:10]} differ"


@pytest.mark.parametrize("name", TYPES)
def test_ties_round_away_from_zero_and_single_blocks(name):
    """The ties' quants are roundf's (not rint's: 0.5 -> 1, -2.5 -> -3), and each block alone (n = 32) gives
    the bytes it gives in the row."""
    tid, x = TYPE_IDS[name], tie_rows()
    got = K.quantize_act_packed(tid, x)
    blocks = x.reshape(16, 32)
    q = got.reshape(16, 40)[:8, 1:32].view(np.int8).astype(np.float32)
    assert np.array_equal(q, np.copysign(np.floor(np.abs(blocks[:8, 1:]) + 0.5), blocks[:8, 1:]))
    for b, row in enumerate(blocks):
        one = row.reshape(1, 32)
        assert np.array_equal(K.quantize_act_packed(tid, one)[0], got[0, 40 * b:40 * (b + 1)]), b


def test_bad_row_length_raises():
    with pytest.raises(ValueError, match="n=48"):
        K.quantize_act_packed(TYPE_IDS["Q4_1"], np.zeros((1, 48), np.float32))
    with pytest.raises(ValueError, match="row_bytes=39"):
        K.quantize_act_packed(TYPE_IDS["Q4_1"], np.zeros((1, 32), np.float32), row_bytes=39)

