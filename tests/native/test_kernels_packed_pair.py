"""Decode's two-stream packed products (quants-packed-avx2.cpp's packed_tile_pair, session 37): one token over
a row range pairs group i with group i + m of the range's whole groups (m: half of them), the odd group and a
partial last group going through the one-group tile; the K-quant tiles (Q4_K / Q5_K / Q6_K, session 38) pair the
same way, their super-blocks alternated. Every row must come out once, in the floats of the
unpaired tiles (quants.h's bitwise rule): the one-token product of every range [16a, r1) equals the first token
of the same range's two-token product (two tokens never pair), bit for bit, and each range's rows equal the
whole matrix's. On builds without the pairing (AVX-512, scalar) the same checks hold trivially."""

from __future__ import annotations

import numpy as np
import pytest

from .kernel_data import TYPE_IDS, K, random_activations, random_weights

N = 64             # two blocks of 32
N_K = 512          # the K-quants: two super-blocks of 256
ROWS = 16 * 9 + 5  # 9 whole groups and a partial tenth: odd, even and partial ranges below


@pytest.mark.skipif(not K.packed_supported(TYPE_IDS["Q4_1"]), reason=f"no packed products in this {K.simd_name()} build")
@pytest.mark.parametrize("name", ["Q4_1", "Q8_0", "IQ4_NL", "Q4_K", "Q5_K", "Q6_K"])
def test_one_token_pairs_match_the_unpaired_tiles(name):
    tid = TYPE_IDS[name]
    if not K.packed_supported(tid):
        pytest.skip(f"no packed {name} in this {K.simd_name()} build")
    n = N_K if name.endswith("_K") else N
    rng = np.random.default_rng(37)
    pw = K.pack_rows(tid, random_weights(rng, name, ROWS, n), n)
    xp = K.prepare_act_packed(tid, K.quantize_act_row(tid, random_activations(rng, 2, n)), n)
    whole = K.matmul_packed(tid, pw, ROWS, xp[:1], n)[0]
    assert np.array_equal(whole.view(np.uint32), K.matmul_packed(tid, pw, ROWS, xp, n)[0].view(np.uint32))
    for a in range(0, ROWS // 16 + 1):
        for r1 in range(16 * a + 1, ROWS + 1):
            one = K.matmul_packed(tid, pw, ROWS, xp[:1], n, 16 * a, r1)[0]
            two = K.matmul_packed(tid, pw, ROWS, xp, n, 16 * a, r1)[0]
            assert np.array_equal(one.view(np.uint32), two.view(np.uint32)), (name, 16 * a, r1)
            assert np.array_equal(one.view(np.uint32), whole[16 * a:r1].view(np.uint32)), (name, 16 * a, r1)
