"""Activations quantized straight into prepared packed rows (quantize_act_row_packed, the engine's path; on
AVX2 builds quants-packed-avx2.cpp's fused quantizer, 8 blocks at a time) give the bytes of the two steps
it replaces, quantize_act_row then prepare_act_row_packed: at every row length's tail of 1..8 blocks, over
scales from 1e30 down to subnormal (d = 0, 1 / d overflowing), and with non-finite blocks. Skipped in
builds without packed products."""

from __future__ import annotations

import numpy as np
import pytest

from .kernel_data import TYPE_IDS, K, random_activations

pytestmark = pytest.mark.skipif(not K.packed_supported(TYPE_IDS["Q4_1"]),
                                reason=f"no packed products in this {K.simd_name()} build")

TYPES = ["Q4_1", "Q8_0", "IQ4_NL"]


def two_steps(tid: int, x: np.ndarray) -> np.ndarray:
    return K.prepare_act_packed(tid, K.quantize_act_row(tid, x), x.shape[1])


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("n", [32, 64, 96, 128, 160, 192, 224, 256, 288, 576, 1536])
def test_fused_equals_quantize_then_prepare(name, n):
    tid = TYPE_IDS[name]
    x = random_activations(np.random.default_rng(n), 5, n)
    got = K.quantize_act_packed(tid, x)
    assert got.shape == (5, n // 32 * 40)
    assert np.array_equal(got, two_steps(tid, x))


@pytest.mark.parametrize("name", TYPES)
def test_fused_equals_two_steps_at_extreme_scales(name):
    """Each block at its own scale (a group of 8 blocks mixes them), its largest magnitude once negative;
    some blocks infinite or NaN: whatever the two steps give there, the fused path gives too."""
    tid = TYPE_IDS[name]
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
    assert np.array_equal(K.quantize_act_packed(tid, x), two_steps(tid, x))


def test_bad_row_length_raises():
    with pytest.raises(ValueError, match="n=48"):
        K.quantize_act_packed(TYPE_IDS["Q4_1"], np.zeros((1, 48), np.float32))


@pytest.mark.parametrize("name", TYPES)
def test_fused_equals_two_steps_with_nan(name):
    """A NaN at each place of each block of a group of 8: the amax's max instructions keep or drop it by
    their operand order, so the fused reduction over 8 blocks must pair and order them as the per-block
    one (quants-avx2.cpp's hmax8: lanes i and i + 4, then i + 2, then i + 1)."""
    tid = TYPE_IDS[name]
    x = np.tile(random_activations(np.random.default_rng(3), 1, 8 * 32), (2 * 8 * 32, 1))
    for i in range(8 * 32):
        x[2 * i, i] = np.nan
        x[2 * i + 1, i] = -np.nan
    assert np.array_equal(K.quantize_act_packed(tid, x), two_steps(tid, x))


@pytest.mark.parametrize("name", TYPES)
def test_fused_equals_two_steps_at_ties_and_signed_zeros(name):
    """Blocks of amax 127 (d = 1: x / d is x) holding every k + 0.5 tie in [-126.5, 126.5], rounded away
    from zero as roundf (not to even); blocks of -0.0 / +0.0 only; one block alone (n = 32)."""
    tid = TYPE_IDS[name]
    ties = np.arange(-126.5, 127.0, 1.0, dtype=np.float32)   # 254 ties
    blocks = np.zeros((16, 32), np.float32)
    blocks[:8, 0] = 127.0
    blocks[:8, 1:] = np.resize(ties, (8, 31))
    blocks[8:12] = -0.0
    blocks[12, 5] = -0.0
    x = blocks.reshape(1, -1)
    got = K.quantize_act_packed(tid, x)
    assert np.array_equal(got, two_steps(tid, x))
    q = got.reshape(16, 40)[:8, 1:32].view(np.int8).astype(np.float32)
    assert np.array_equal(q, np.copysign(np.floor(np.abs(blocks[:8, 1:]) + 0.5), blocks[:8, 1:]))
    for row in blocks:
        one = row.reshape(1, 32)
        assert np.array_equal(K.quantize_act_packed(tid, one), two_steps(tid, one))
