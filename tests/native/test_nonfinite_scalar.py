"""Non-finite activations and queries through the scalar kernels (no SIMD flags: quants-generic.cpp's activation
quantizers, attention-q8.cpp's query quantizer), where a float -> int cast of NaN, inf or an out-of-range value
was undefined behaviour. Defined now as:

- activations (Q8_0 / Q8_1 / Q8_K rows): each lane as the AVX2 quantizers convert it: a rounded value NaN or
  outside int32 becomes INT_MIN (cvtps2dq's "integer indefinite"), saturated to -128 in the row, and the sums
  (Q8_1's s, Q8_K's bsums) add the int32 lanes as the AVX2 code does. The block's scale still comes from the
  scalar max of |x|, which drops every NaN; AVX2's maxps tree keeps or drops one by its place (a block of NaN
  only: scale NaN there, 0 here), so on an AVX2 build the bytes are compared where its max drops the NaN too.
  (AVX-512's vpmovdb truncates INT_MIN to 0 where AVX2 saturates it to -128.)
- a query block with a NaN or inf: its scale NaN (int8 values 0), so the head's q8_0 scores are NaN as f16 KV's
  are; a block so small (amax below 127 x 2^-128) that 1 / its scale overflows: values 0 (x * inf was cast).

Skipped without g++. One compile of the kernel sources (one g++ per core), ~1-2 min on two cores.
"""

from __future__ import annotations

import numpy as np
import pytest

from .kernel_data import TYPE_IDS, K, quantize_act_numpy, random_activations
from .toolchain import CHECK_FLAGS, gxx_and_cpu_or_skip, kernels_module, load_kernels

Q8_0_KV, F16_KV = 8, 1
HEAD_DIM = 64


@pytest.fixture(scope="module")
def scalar(tmp_path_factory):
    """The kernels module built without SIMD flags (the scalar quantizers and vec16 lanes)."""
    compiler = gxx_and_cpu_or_skip([])
    target = kernels_module(compiler, CHECK_FLAGS, "_kernels_scalar", tmp_path_factory.mktemp("scalar"))
    module = load_kernels(target, "_kernels_scalar")
    assert module.simd_name() == "scalar"
    return module


def nonfinite_rows() -> np.ndarray:
    """(3, 256) activations: NaN, +-inf and a subnormal block among ordinary values, each where the AVX2
    quantizers' max of |x| drops a NaN as the scalar one does (the first 8 lanes of a block)."""
    rng = np.random.default_rng(36)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    x[0, 3] = np.nan                                  # Q8_0 block 0: the lane alone
    x[0, 64] = -np.inf                                # block 2: amax inf, scale inf, the other lanes 0
    x[0, 96:128] = np.float32(1e-40) * np.sign(x[0, 96:128])   # block 3: scale 1 / (amax / 127) overflows
    x[0, 100] = 0.0
    x[1, 5] = np.nan                                  # Q8_K: a finite block with one NaN lane
    x[2, :32] = np.nan                                # a block of NaN only (AVX2's max keeps the NaN there)
    return x


@pytest.mark.parametrize("name", ["Q8_0", "Q4_1", "Q4_K"])   # activations Q8_0, Q8_1 (with sums), Q8_K
def test_nonfinite_activations_quantize_as_avx2(scalar, name):
    x = nonfinite_rows()
    tid = TYPE_IDS[name]
    got = scalar.quantize_act_row(tid, x)
    if name == "Q8_0":   # blocks of 34 bytes: fp16 d, 32 int8
        blocks = got.reshape(3, 8, 34)
        qs = blocks[:, :, 2:].view(np.int8)
        d = blocks[:, :, :2].copy().view(np.float16)[..., 0]
        assert qs[0, 0, 3] == -128 and np.isfinite(d[0, 0])
        assert np.isinf(d[0, 2]) and qs[0, 2, 0] == -128 and not qs[0, 2, 1:].any()
        assert (qs[0, 3] == -128).all()
        assert (qs[2, 0] == -128).all() and d[2, 0] == 0   # the scalar max drops every NaN: amax 0
    if K.simd_name() == "avx2":   # where AVX2's max of |x| drops the NaN too: not a block of NaN only
        np.testing.assert_array_equal(got[:2], K.quantize_act_row(tid, x[:2]))


@pytest.mark.parametrize("name", ["Q8_0", "Q4_1", "Q4_K"])
def test_finite_activations_quantize_as_before(scalar, name):
    """The scalar quantizers' finite rows: the NumPy quantizers' bytes (the conversions changed nothing there)."""
    rng = np.random.default_rng(37)
    x = random_activations(rng, 4, 512)
    x[1, :256] = np.float32(127.0) * np.round(rng.uniform(-2, 2, 256) * 2) / 2   # exact .5 ties at d = 1
    x[1, 0] = 127.0
    got = scalar.quantize_act_row(TYPE_IDS[name], x)
    for t in range(4):
        np.testing.assert_array_equal(got[t], quantize_act_numpy(name, x[t]))


def quantized_kv(kv_type: int, n_pos: int):
    rng = np.random.default_rng(7)
    k = rng.standard_normal((n_pos, HEAD_DIM)).astype(np.float32)
    return K.kv_pack(kv_type, 1, HEAD_DIM, k, k)[0]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_nonfinite_query_head_scores_nan_as_f16(scalar, bad):
    n_pos = 50
    rng = np.random.default_rng(8)
    q = rng.standard_normal((3, HEAD_DIM)).astype(np.float32)
    q2 = q.copy()
    q2[1, 37] = bad
    for kv_type in (Q8_0_KV, F16_KV):
        kb = quantized_kv(kv_type, n_pos)
        clean = scalar.attention_scores(kv_type, 1, HEAD_DIM, kb, q, 0, n_pos, 0.125)
        got = scalar.attention_scores(kv_type, 1, HEAD_DIM, kb, q2, 0, n_pos, 0.125)
        assert np.isnan(got[1, :n_pos]).all() if kv_type == Q8_0_KV else not np.isfinite(got[1, :n_pos]).any()
        np.testing.assert_array_equal(got[[0, 2]], clean[[0, 2]])
        np.testing.assert_array_equal(got, K.attention_scores(kv_type, 1, HEAD_DIM, kb, q2, 0, n_pos, 0.125))


def test_a_subnormal_query_head_scores_finite(scalar):
    n_pos = 40
    q = np.full((2, HEAD_DIM), 1e-40, np.float32)
    q[:, ::3] = -1e-40
    q[:, 7] = 0.0
    kb = quantized_kv(Q8_0_KV, n_pos)
    got = scalar.attention_scores(Q8_0_KV, 1, HEAD_DIM, kb, q, 0, n_pos, 0.125)
    assert np.isfinite(got[:, :n_pos]).all()
    np.testing.assert_array_equal(got, K.attention_scores(Q8_0_KV, 1, HEAD_DIM, kb, q, 0, n_pos, 0.125))
