"""Row-interleaved ("packed") Q4_1 / Q8_0 / IQ4_NL weights (quants-packed.h; IQ4_NL's layout and extremes:
test_kernels_packed_iq4.py): packing round-trips to the GGUF
bytes, the packed products equal the scalar reference within the products' tolerance, a result is
bit for bit the same whatever n_tok, the row range or the token tiling, and padding rows never
reach an output (those checks shared with the K-quants in packed_checks.py). Skipped in builds
without packed products (no AVX-512 VNNI)."""

from __future__ import annotations

import numpy as np
import pytest

from . import packed_checks as checks
from .kernel_data import TYPE_IDS, K

PACKED_TYPES = ["Q4_1", "Q8_0", "IQ4_NL"]

pytestmark = pytest.mark.skipif(not K.packed_supported(TYPE_IDS["Q4_1"]),
                                reason=f"no packed products in this {K.simd_name()} build")


@pytest.mark.parametrize("name", PACKED_TYPES)
@pytest.mark.parametrize("n_rows", [1, 15, 16, 17, 37, 64])
def test_pack_round_trip(name, n_rows):
    """unpack(pack(w)) gives the GGUF rows back byte for byte; the packed size is whole groups."""
    checks.check_round_trip(name, n_rows, 96, 32, {"Q4_1": 320, "Q8_0": 544, "IQ4_NL": 288}[name])


def test_pack_layout_interleaves_rows_by_four_bytes():
    """Q8_0 block 0 of group 0: 64-byte vector j holds, in 4-byte lane r, quants 4j..4j+3 of row r
    (+128); then the 16 rows' fp16 scales."""
    tid = TYPE_IDS["Q8_0"]
    w, _ = checks.case("Q8_0", 16, 32, 1, 3)
    p = K.pack_rows(tid, w, 32)
    qs = w[:, 2:34].view(np.int8)                                  # (16, 32)
    vec = p[:512].reshape(8, 16, 4)                                # (j, r, byte)
    assert np.array_equal(vec, (qs.reshape(16, 8, 4).transpose(1, 0, 2).astype(np.int16) + 128).astype(np.uint8))
    assert np.array_equal(p[512:544].reshape(16, 2), w[:, 0:2])


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_packed_matches_scalar_reference(name):
    """Same integer block sums as matvec_generic, a different float order: within 1e-5 of the
    magnitude (sum of |w x|), as the GGUF-layout fast products."""
    for n in (32, 224, 576, 1536):
        checks.check_matches_scalar(name, n, TYPE_IDS[name] * 100 + n)


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_packed_bitwise_whatever_n_tok_and_row_range(name):
    """Every (token, row) is the same float for 1..17 tokens (token tiles of 8 and a remainder) and
    row ranges starting at group boundaries, ending anywhere (odd row count: a padded last group)."""
    checks.check_bitwise_n_tok_and_row_range(name, 224, TYPE_IDS[name])


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_packed_across_activation_tiles_bitwise(name):
    """Long rows: 256 KiB of prepared activations hold ~40 tokens, so 60 tokens cross two tiles."""
    checks.check_across_activation_tiles(name, TYPE_IDS[name] + 7)


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_padding_never_leaks(name):
    """Rows past r1 in the last group are not written: the output buffer's other columns keep their
    values, and 17 rows give the same first 17 results as the same rows inside 32."""
    checks.check_padding_never_leaks(name, 64, TYPE_IDS[name] + 11)


def test_q8_0_offset_is_exact_at_extremes():
    """Q8_0 weights of -128 / 127 against activations of +-127: the +128 storage and the -128 * sum
    correction cancel exactly (integers): the packed product is the scalar one up to float rounding
    (an error in the offset would be off by multiples of 128 * d)."""
    tid = TYPE_IDS["Q8_0"]
    n = 64
    w = np.zeros((16, 2 * 34), np.uint8)
    halves = np.array([1.0], "<f2").view(np.uint8)
    for b in range(2):
        w[:, 34 * b:34 * b + 2] = halves
        w[:, 34 * b + 2:34 * b + 34] = np.where(np.arange(32) % 2, 127, -128).astype(np.int8).view(np.uint8)
    x = np.where(np.arange(n) % 3, 1.0, -1.0).astype(np.float32)[None, :]
    xq = K.quantize_act_row(tid, x)
    pw, xp = checks.packed("Q8_0", w, n, xq)
    got = K.matmul_packed(tid, pw, 16, xp, n)[0]
    ref = K.matvec_generic(tid, w, xq[0], n)
    assert np.allclose(got, ref, rtol=1e-6, atol=0), (got, ref)


def test_bad_arguments_raise():
    tid = TYPE_IDS["Q4_1"]
    w, xq = checks.case("Q4_1", 20, 64, 2, 1)
    pw, xp = checks.packed("Q4_1", w, 64, xq)
    with pytest.raises(ValueError, match="multiple of 16"):
        K.matmul_packed(tid, pw, 20, xp, 64, 3, 20)
    with pytest.raises(ValueError, match="packed weights hold"):
        K.matmul_packed(tid, pw[:-1], 20, xp, 64)
    with pytest.raises(ValueError, match="no packed products for type Q4_0"):
        K.pack_rows(TYPE_IDS["Q4_0"], np.zeros(18 * 2, np.uint8), 64)
    with pytest.raises(ValueError, match="xp must be"):
        K.matmul_packed(tid, pw, 20, xq, 64)
