"""Kernel formats: dequantize_row against gguf's dequantize for every type, quantize_act_row against
the NumPy reimplementations byte for byte, fp16 conversions against NumPy, and bad arguments."""

from __future__ import annotations

import re

import numpy as np
import pytest

from .kernel_data import (
    BLOCK,
    TYPE_IDS,
    WEIGHT_TYPES,
    K,
    quantize_act_numpy,
    random_activations,
    random_weights,
    true_values,
)


@pytest.mark.parametrize("name", WEIGHT_TYPES)
def test_dequantize_row_matches_gguf(name):
    rng = np.random.default_rng(TYPE_IDS[name])
    n = 512 if BLOCK[name] == 256 else 96
    w = random_weights(rng, name, 5, n)
    want = true_values(name, w)
    for r in range(w.shape[0]):
        got = K.dequantize_row(TYPE_IDS[name], w[r], n)
        # same products; only a fused multiply-add (one rounding instead of two) may differ
        np.testing.assert_allclose(got, want[r], rtol=1e-6, atol=1e-6 * float(np.abs(want[r]).max()))


@pytest.mark.parametrize("name", WEIGHT_TYPES)
def test_quantize_act_row_matches_numpy(name):
    rng = np.random.default_rng(100 + TYPE_IDS[name])
    n = 768 if BLOCK[name] == 256 else 224
    x = random_activations(rng, 3, n)
    got = K.quantize_act_row(TYPE_IDS[name], x)
    assert got.shape == (3, K.act_row_bytes(TYPE_IDS[name], n))
    for t in range(3):
        np.testing.assert_array_equal(got[t], quantize_act_numpy(name, x[t]))
        np.testing.assert_array_equal(K.quantize_act_row(TYPE_IDS[name], x[t]), got[t])


def test_quantize_act_row_rounding_ties():
    """Exact halves: Q8_0 rounds away from zero (roundf), Q8_K to even (ggml's nearest_int)."""
    x = np.zeros(256, dtype=np.float32)
    x[0] = 127.0                     # d = 1 (Q8_0 block 0), iscale = -1 (Q8_K)
    x[1:6] = [0.5, 1.5, 2.5, -0.5, -2.5]
    for name in ("Q8_0", "Q4_1", "Q6_K"):
        np.testing.assert_array_equal(K.quantize_act_row(TYPE_IDS[name], x), quantize_act_numpy(name, x))
    q8_0 = K.quantize_act_row(TYPE_IDS["Q8_0"], x)[2:34].view(np.int8)
    assert list(q8_0[1:6]) == [1, 2, 3, -1, -3]
    q8_k = K.quantize_act_row(TYPE_IDS["Q6_K"], x)[4:260].view(np.int8)
    assert list(q8_k[1:6]) == [0, -2, -2, 0, 2]      # iscale = -127 / 127 = -1


def test_fp16_conversions_match_numpy():
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    want = halves.view(np.float16).astype(np.float32)
    got = K.fp16_to_fp32(halves)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[finite], want[finite])
    assert np.isnan(got[np.isnan(want)]).all()
    rng = np.random.default_rng(7)
    f = np.concatenate([
        rng.standard_normal(20000).astype(np.float32) * np.float32(1e-5),   # subnormal halves
        rng.standard_normal(20000).astype(np.float32) * 300,
        want[finite],                                                       # exact, and the ties:
        ((want[finite][:-1].astype(np.float64) + want[finite][1:]) / 2).astype(np.float32),
        np.array([65519.0, 65520.0, 1e9, -1e9, 2.0**-25, 2.0**-26, 0.0, -0.0], dtype=np.float32),
    ])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(K.fp32_to_fp16(f), f.astype(np.float16).view(np.uint16))


def test_type_table():
    assert K.type_name(3) == "Q4_1" and K.type_name(99) is None
    assert K.type_row_bytes(TYPE_IDS["Q4_1"], 576) == 18 * 20
    assert K.type_row_bytes(TYPE_IDS["Q6_K"], 512) == 2 * 210
    assert K.act_row_bytes(TYPE_IDS["Q4_1"], 64) == 72          # two Q8_1 blocks
    assert K.act_row_bytes(TYPE_IDS["Q4_K"], 256) == 292        # one Q8_K block
    assert K.act_row_bytes(TYPE_IDS["BF16"], 10) == 40          # f32 activations
    assert K.act_type_for(TYPE_IDS["Q5_0"]) == TYPE_IDS["Q8_0"]
    assert all(K.type_supported(TYPE_IDS[t]) for t in WEIGHT_TYPES)
    assert not K.type_supported(16) and not K.type_supported(TYPE_IDS["Q8_K"])   # IQ2_XXS: not computed with


def test_native_build_uses_vnni_when_the_cpu_has_it():
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    have = {f for f in ("avx512f", "avx512bw", "avx512vl", "avx512_vnni") if re.search(rf"\b{f}\b", flags)}
    if len(have) < 4:
        pytest.skip("CPU without AVX-512 VNNI")
    assert K.simd_name() == "avx512-vnni"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: K.type_row_bytes(TYPE_IDS["Q4_1"], 48), r"n=48 must be a positive multiple of Q4_1's block size 32"),
        (lambda: K.type_row_bytes(TYPE_IDS["Q6_K"], 0), r"n=0"),
        (lambda: K.act_row_bytes(15, 256), r"Q8_K \(15\) is not a supported weight type"),
        (lambda: K.act_row_bytes(77, 256), r"unknown type id 77"),
        (lambda: K.dequantize_row(TYPE_IDS["Q8_0"], np.zeros(68, np.uint8), 40), r"multiple of Q8_0's block size"),
        (lambda: K.dequantize_row(TYPE_IDS["Q8_0"], np.zeros(33, np.uint8), 32), r"33 bytes given"),
        (lambda: K.dequantize_row(16, np.zeros(66, np.uint8), 256), r"unknown type id 16"),
        (lambda: K.quantize_act_row(TYPE_IDS["Q4_K"], np.zeros(300, np.float32)), r"multiple of Q4_K's block size 256"),
        (lambda: K.matvec(TYPE_IDS["Q4_0"], np.zeros((2, 18), np.uint8), np.zeros(34, np.uint8), 33),
         r"n=33"),
        (lambda: K.matvec(TYPE_IDS["Q4_0"], np.zeros((2, 18), np.uint8), np.zeros(34, np.uint8), 32, 1, 3),
         r"row range \[1, 3\) is outside the 2 rows"),
        (lambda: K.matvec(TYPE_IDS["Q4_0"], np.zeros(30, np.uint8), np.zeros(34, np.uint8), 32),
         r"not a whole number of Q4_0 rows"),
        (lambda: K.matvec(TYPE_IDS["Q8_0"], np.zeros((2, 34), np.uint8), np.zeros(20, np.uint8), 32),
         r"one activation row needs 34"),
        (lambda: K.matmul(TYPE_IDS["Q8_0"], np.zeros((2, 34), np.uint8), np.zeros((3, 36), np.uint8), 32),
         r"xq must be \(n_tok, 34\)"),
        (lambda: K.matvec_generic(TYPE_IDS["Q5_K"], np.zeros((1, 176), np.uint8), np.zeros(292, np.uint8), 128),
         r"multiple of Q5_K's block size 256"),
    ],
)
def test_bad_arguments_raise_naming_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()
