"""The AVX2 kernels (quants-avx2.cpp, and the packed Q4_1 / Q8_0 / IQ4_NL / Q4_K / Q5_K / Q6_K products of
quants-packed-avx2.cpp), which a native build on an AVX-512 machine never compiles: build the kernel
files with -mavx2 -mfma -mf16c (and again with -mavxvnni, the dpbusd variant of Intel desktop CPUs)
into throwaway modules and hold them to the same rules as the native build (fast matvec vs the
scalar reference, matmul vs matvec bit for bit; the packed products likewise, whatever n_tok or the
row range; the activations quantized straight into prepared rows byte for byte the two steps).

Skipped without g++ or on a CPU without the instructions. Takes ~15 s per compile (the files one g++ per core)."""

from __future__ import annotations

import numpy as np
import pytest

from .kernel_data import (
    BLOCK,
    TYPE_IDS,
    WEIGHT_TYPES,
    act_values,
    quantize_act_numpy,
    random_activations,
    random_weights,
    true_values,
)
from .test_kernels_packed_act import hard_rows
from .toolchain import CHECK_FLAGS, gxx_and_cpu_or_skip, kernels_module, load_kernels

VARIANTS = {   # name: (compiler flags, /proc/cpuinfo flags the CPU needs)
    "avx2": (["-mavx2", "-mfma", "-mf16c"], ["avx2", "fma", "f16c"]),
    "avx2-vnni": (["-mavx2", "-mfma", "-mf16c", "-mavxvnni"], ["avx2", "fma", "f16c", "avx_vnni"]),
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def avx2(request, tmp_path_factory):
    """The kernels module built for one AVX2 variant."""
    flags_cc, flags_cpu = VARIANTS[request.param]
    compiler = gxx_and_cpu_or_skip(flags_cpu)
    target = kernels_module(compiler, [*CHECK_FLAGS, *flags_cc], "_kernels_avx2", tmp_path_factory.mktemp(request.param))
    return load_kernels(target, "_kernels_avx2")


def test_avx2_build_is_avx2(avx2):
    assert avx2.simd_name() == "avx2"


@pytest.mark.parametrize("name", WEIGHT_TYPES)
def test_avx2_matvec_matches_generic_and_matmul_matches_matvec(avx2, name):
    tid = TYPE_IDS[name]
    n = {1: 1000, 32: 576, 256: 768}[BLOCK[name]]
    rng = np.random.default_rng(40 + tid)
    w = random_weights(rng, name, 23, n)
    xq = avx2.quantize_act_row(tid, random_activations(rng, 7, n))
    single = np.stack([avx2.matvec(tid, w, xq[t], n) for t in range(7)])
    for t in range(7):
        ref = avx2.matvec_generic(tid, w, xq[t], n)
        mag = np.abs(true_values(name, w).astype(np.float64)) @ np.abs(act_values(name, xq[t]))
        assert (np.abs(single[t].astype(np.float64) - ref) <= 1e-5 * mag + 1e-30).all(), (name, t)
    for r0, r1 in [(0, 23), (3, 14), (6, 7)]:
        for n_tok in (1, 2, 3, 5, 7):
            assert np.array_equal(avx2.matmul(tid, w, xq[:n_tok], n, r0, r1), single[:n_tok, r0:r1]), (name, r0, n_tok)


@pytest.mark.parametrize("name", ["Q8_0", "Q4_1", "Q4_K"])
def test_avx2_activation_quantizers_match_numpy(avx2, name):
    rng = np.random.default_rng(77)
    x = random_activations(rng, 5, 768)
    x[1, :256] = np.float32(127.0) * np.round(rng.uniform(-2, 2, 256) * 2) / 2   # exact .5 ties at d = 1
    x[1, 0] = 127.0
    got = avx2.quantize_act_row(TYPE_IDS[name], x)
    for t in range(5):
        np.testing.assert_array_equal(got[t], quantize_act_numpy(name, x[t]))


AVX2_FUSED_ACT = ["Q4_1", "Q8_0", "IQ4_NL"]   # activations quantized straight into prepared rows
AVX2_PACKED = [*AVX2_FUSED_ACT, "Q4_K", "Q5_K", "Q6_K"]


def test_avx2_packs_only_its_types(avx2):
    """Q4_1 / Q8_0 / IQ4_NL / Q4_K / Q5_K / Q6_K have packed products; Q3_K / Q2_K / IQ4_XS keep the
    GGUF-layout ones."""
    assert [avx2.packed_supported(TYPE_IDS[t]) for t in AVX2_PACKED] == [True] * len(AVX2_PACKED)
    assert not any(avx2.packed_supported(TYPE_IDS[t]) for t in ("Q3_K", "Q2_K", "IQ4_XS"))


@pytest.mark.parametrize("name", AVX2_PACKED)
def test_avx2_packed_matches_generic_and_is_bitwise_whatever_n_tok(avx2, name):
    """53 rows (a padded last group, a half group of 5), 17 tokens (tiles of 8 and a remainder): within
    1e-5 of the magnitude of the scalar reference, and every (token, row) the same float for any n_tok
    and row range starting at a group boundary. Rows of 576 (the K-quants: 512, two super-blocks)."""
    tid, n_rows, n = TYPE_IDS[name], 53, 512 if name.endswith("_K") else 576
    rng = np.random.default_rng(90 + tid)
    w = random_weights(rng, name, n_rows, n)
    xq = avx2.quantize_act_row(tid, random_activations(rng, 17, n))
    pw, xp = avx2.pack_rows(tid, w, n), avx2.prepare_act_packed(tid, xq, n)
    single = np.stack([avx2.matmul_packed(tid, pw, n_rows, xp[t:t + 1], n)[0] for t in range(17)])
    mag_w = np.abs(true_values(name, w).astype(np.float64))
    for t in range(17):
        ref = avx2.matvec_generic(tid, w, xq[t], n)
        assert (np.abs(single[t].astype(np.float64) - ref) <= 1e-5 * (mag_w @ np.abs(act_values(name, xq[t]))) + 1e-30).all()
    for r0, r1 in [(0, n_rows), (16, 33), (48, 53), (0, 9), (32, 40)]:
        for n_tok in (1, 2, 5, 8, 9, 17):
            got = avx2.matmul_packed(tid, pw, n_rows, xp[:n_tok], n, r0, r1)
            assert np.array_equal(got, single[:n_tok, r0:r1]), (name, r0, r1, n_tok)


@pytest.mark.parametrize("name", ["Q8_0", "IQ4_NL"])
def test_avx2_packed_signed_extremes(avx2, name):
    """The sign trick at its limits: Q8_0 weights of -128 / 127 (IQ4_NL: its -127 / 113) against
    activations of +-127: a maddubs pair sum of 2 * 128 * 127 must not saturate."""
    tid, n = TYPE_IDS[name], 64
    bb = 34 if name == "Q8_0" else 18
    w = np.zeros((16, 2 * bb), np.uint8)
    one = np.array([1.0], "<f2").view(np.uint8)
    for b in range(2):
        w[:, bb * b:bb * b + 2] = one
        if name == "Q8_0":
            w[:, bb * b + 2:bb * b + 34] = np.where(np.arange(32) % 2, 127, -128).astype(np.int8).view(np.uint8)
        else:   # nibbles 0 (-127) and 15 (113)
            w[:, bb * b + 2:bb * b + 18] = np.where(np.arange(16) % 2, 0xF0, 0x0F).astype(np.uint8)
    x = np.where(np.arange(n) % 2, -1.0, 1.0).astype(np.float32)[None, :]
    xq = avx2.quantize_act_row(tid, x)
    got = avx2.matmul_packed(tid, avx2.pack_rows(tid, w, n), 16, avx2.prepare_act_packed(tid, xq, n), n)[0]
    ref = avx2.matvec_generic(tid, w, xq[0], n)
    assert np.allclose(got, ref, rtol=1e-6, atol=0), (got, ref)


@pytest.mark.parametrize("name", AVX2_FUSED_ACT)
def test_avx2_fused_act_quantizer_equals_two_steps(avx2, name):
    """quants-packed-avx2.cpp's activations straight into prepared rows (the only build that has them: a
    native AVX-512 build runs test_kernels_packed_act.py against the two steps themselves) give the bytes of
    quantize_act_row then prepare_act_packed: every tail of 1..8 blocks, and that file's hard rows
    (extreme scales, inf, NaN at each place of a group, .5 ties, signed zeros)."""
    tid = TYPE_IDS[name]
    cases = {**hard_rows(), **{f"n={32 * b}": random_activations(np.random.default_rng(b), 3, 32 * b) for b in range(1, 18)}}
    for case, x in cases.items():
        prow = x.shape[1] // 32 * 40
        got = avx2.quantize_act_packed(tid, x, row_bytes=prow + 320)   # 0xA5 past each row: nothing written there
        assert np.array_equal(got[:, :prow], avx2.prepare_act_packed(tid, avx2.quantize_act_row(tid, x), x.shape[1])), case
        assert (got[:, prow:] == 0xA5).all(), case
