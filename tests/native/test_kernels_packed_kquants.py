"""Packed (row-interleaved) K-quant products, Q4_K, Q5_K, Q6_K and Q3_K alike (quants-packed.h): packing
round-trips to the GGUF bytes (whole groups of one block per 16 rows and super-block), the products
equal the scalar reference within the products' tolerance (super-block counts 1, 2, 8, 11), a result
is bit for bit the same whatever n_tok, the row range or the token tiling, padding rows never reach
an output, and bad arguments are refused by name. Each type's layout, prepared activations and
extremes are in test_kernels_packed_q4k.py / _q5k.py / _q6k.py / _q3k.py. Skipped per type in builds without its
packed products (no AVX-512 VNNI)."""

from __future__ import annotations

import pytest

from . import packed_checks as checks
from .kernel_data import TYPE_IDS, K

BLOCK_BYTES = {"Q4_K": 2368, "Q5_K": 2880, "Q6_K": 3360, "Q3_K": 1824, "Q2_K": 1344, "IQ4_XS": 2208}   # 16 rows x 256

TYPES = [pytest.param(name, marks=pytest.mark.skipif(not K.packed_supported(TYPE_IDS[name]),
                                                     reason=f"no packed {name} products in this {K.simd_name()} build"))
         for name in BLOCK_BYTES]


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("n_rows", [1, 15, 16, 17, 37])
def test_pack_round_trip(name, n_rows):
    """The 6-bit scale repacking is exact too: Q4_K +2.8% over 16 x 144, Q5_K +2.3% over 16 x 176,
    Q3_K +3.6% over 16 x 110; Q6_K: 16 x 210, no growth."""
    checks.check_round_trip(name, n_rows, 512, 256, BLOCK_BYTES[name])


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("n", [256, 512, 2048, 2816])
def test_packed_matches_scalar_reference(name, n):
    """The same integer sums as matvec_generic, a different float order."""
    checks.check_matches_scalar(name, n, n)


@pytest.mark.parametrize("name", TYPES)
def test_packed_bitwise_whatever_n_tok_and_row_range(name):
    checks.check_bitwise_n_tok_and_row_range(name, 512, 21)


@pytest.mark.parametrize("name", TYPES)
def test_packed_across_activation_tiles_bitwise(name):
    checks.check_across_activation_tiles(name, 8)


@pytest.mark.parametrize("name", TYPES)
def test_padding_never_leaks(name):
    checks.check_padding_never_leaks(name, 256, 11)


@pytest.mark.parametrize("name", TYPES)
def test_bad_arguments_raise(name):
    tid = TYPE_IDS[name]
    w, xq = checks.case(name, 20, 512, 2, 1)
    pw, xp = checks.packed(name, w, 512, xq)
    with pytest.raises(ValueError, match="multiple of 256"):
        K.packed_bytes(tid, 16, 288)
    with pytest.raises(ValueError, match="multiple of 16"):
        K.matmul_packed(tid, pw, 20, xp, 512, 3, 20)
    with pytest.raises(ValueError, match="packed weights hold"):
        K.matmul_packed(tid, pw[:-1], 20, xp, 512)
    with pytest.raises(ValueError, match="xp must be"):
        K.matmul_packed(tid, pw, 20, xq, 512)
    with pytest.raises(ValueError, match=f"not a whole number of {name} rows"):
        K.pack_rows(tid, w.reshape(-1)[:-1], 512)
