"""Kernel products: the scalar dot products against float64 sums of the true values, the build's fast
matvec against matvec_generic, and matmul against matvec bit for bit (the bitwise rule of quants.h)."""

from __future__ import annotations

import numpy as np
import pytest

from .kernel_data import (
    BLOCK,
    TYPE_IDS,
    WEIGHT_TYPES,
    K,
    act_values,
    min_times_sum,
    random_activations,
    random_weights,
    true_values,
)

N_ROWS = 37   # odd, so row tiles of every width leave remainders


def _shapes(name):
    """Row lengths to try: odd and even block counts, and the default model's widths."""
    if BLOCK[name] == 256:
        return [256, 768, 1536]
    if BLOCK[name] == 32:
        return [32, 224, 576, 1536]
    return [5, 64, 576, 1000]


def _case(name, n, seed):
    rng = np.random.default_rng(seed)
    w = random_weights(rng, name, N_ROWS, n)
    x = random_activations(rng, 9, n)
    xq = K.quantize_act_row(TYPE_IDS[name], x)
    return w, xq


def _magnitude(name, w, xq_row):
    """(n_rows,) sum of |w_i x_i| over the true values: the scale float rounding errors are relative to."""
    return np.abs(true_values(name, w).astype(np.float64)) @ np.abs(act_values(name, xq_row))


@pytest.mark.parametrize("name", WEIGHT_TYPES)
def test_generic_dot_matches_true_values(name):
    """matvec_generic = sum of gguf's dequantized weights times the activation values, within float
    rounding (1e-5 of the magnitude), plus for Q4_1/Q5_1 the fp16 rounding of ggml's Q8_1 block sum."""
    for n in _shapes(name):
        w, xq = _case(name, n, TYPE_IDS[name] * 1000 + n)
        got = K.matvec_generic(TYPE_IDS[name], w, xq[0], n)
        want = true_values(name, w).astype(np.float64) @ act_values(name, xq[0])
        mag = _magnitude(name, w, xq[0])
        for r in range(N_ROWS):
            tol = 1e-5 * mag[r] + 2.0**-10 * min_times_sum(name, w[r], xq[0]) + 1e-30
            assert abs(got[r] - want[r]) <= tol, (name, n, r, got[r], want[r], tol)


@pytest.mark.parametrize("name", WEIGHT_TYPES)
def test_fast_matvec_matches_generic(name):
    """Same integer block sums, different float summation order: within 1e-5 of the magnitude."""
    for n in _shapes(name):
        w, xq = _case(name, n, TYPE_IDS[name] * 2000 + n)
        for t in range(3):
            fast = K.matvec(TYPE_IDS[name], w, xq[t], n)
            ref = K.matvec_generic(TYPE_IDS[name], w, xq[t], n)
            tol = 1e-5 * _magnitude(name, w, xq[t]) + 1e-30
            bad = np.abs(fast.astype(np.float64) - ref) > tol
            assert not bad.any(), (name, n, np.flatnonzero(bad), fast[bad], ref[bad])


@pytest.mark.parametrize("name", WEIGHT_TYPES)
def test_matmul_equals_matvec_bitwise(name):
    n = _shapes(name)[1]
    w, xq = _case(name, n, TYPE_IDS[name] * 3000)
    single = np.stack([K.matvec(TYPE_IDS[name], w, xq[t], n) for t in range(9)])
    for r0, r1 in [(0, N_ROWS), (3, 20), (5, 6), (1, N_ROWS - 1), (7, 7)]:
        for n_tok in range(1, 10):
            got = K.matmul(TYPE_IDS[name], w, xq[:n_tok], n, r0, r1)
            assert got.shape == (n_tok, r1 - r0)
            assert np.array_equal(got, single[:n_tok, r0:r1]), (name, r0, r1, n_tok)
        part = K.matvec(TYPE_IDS[name], w, xq[2], n, r0, r1)
        assert np.array_equal(part, single[2, r0:r1])


def test_matmul_many_tokens_equals_matvec_bitwise():
    """A prefill-sized batch (tiles over many tokens and rows) on the default model's types."""
    for name, n in (("Q4_1", 576), ("Q8_0", 576), ("Q6_K", 256)):
        rng = np.random.default_rng(5)
        w = random_weights(rng, name, 70, n)
        xq = K.quantize_act_row(TYPE_IDS[name], random_activations(rng, 67, n))
        got = K.matmul(TYPE_IDS[name], w, xq, n)
        want = np.stack([K.matvec(TYPE_IDS[name], w, xq[t], n) for t in range(67)])
        assert np.array_equal(got, want), name


def test_matmul_across_token_tiles_equals_matvec_bitwise():
    """Long rows make a token tile (256 KiB of activations) hold only ~15 tokens, so 40 tokens
    cross several tiles (and the q32 formats' prepared-activation buffer is refilled)."""
    for name, n in (("Q4_1", 16384), ("Q8_0", 16384), ("Q4_K", 16384), ("F16", 8192)):
        rng = np.random.default_rng(9)
        w = random_weights(rng, name, 9, n)
        xq = K.quantize_act_row(TYPE_IDS[name], random_activations(rng, 40, n))
        got = K.matmul(TYPE_IDS[name], w, xq, n, 2, 9)
        want = np.stack([K.matvec(TYPE_IDS[name], w, xq[t], n, 2, 9) for t in range(40)])
        assert np.array_equal(got, want), name
