"""Row-interleaved ("packed") Q4_1 / Q8_0 weights (quants-packed.h): packing round-trips to the GGUF
bytes, the packed products equal the scalar reference within the products' tolerance, a result is
bit for bit the same whatever n_tok, the row range or the token tiling, and padding rows never
reach an output. Skipped in builds without packed products (no AVX-512 VNNI)."""

from __future__ import annotations

import numpy as np
import pytest

from .kernel_data import TYPE_IDS, K, act_values, random_activations, random_weights, true_values

PACKED_TYPES = ["Q4_1", "Q8_0"]

pytestmark = pytest.mark.skipif(not K.packed_supported(TYPE_IDS["Q4_1"]),
                                reason=f"no packed products in this {K.simd_name()} build")


def _case(name, n_rows, n, n_tok, seed):
    rng = np.random.default_rng(seed)
    w = random_weights(rng, name, n_rows, n)
    xq = K.quantize_act_row(TYPE_IDS[name], random_activations(rng, n_tok, n))
    return w, xq


def _packed(name, w, n, xq):
    tid = TYPE_IDS[name]
    return K.pack_rows(tid, w, n), K.prepare_act_packed(tid, xq, n)


@pytest.mark.parametrize("name", PACKED_TYPES)
@pytest.mark.parametrize("n_rows", [1, 15, 16, 17, 37, 64])
def test_pack_round_trip(name, n_rows):
    """unpack(pack(w)) gives the GGUF rows back byte for byte; the packed size is whole groups."""
    tid = TYPE_IDS[name]
    n = 96
    w, _ = _case(name, n_rows, n, 1, n_rows)
    p = K.pack_rows(tid, w, n)
    block = {"Q4_1": 320, "Q8_0": 544}[name]
    assert p.size == K.packed_bytes(tid, n_rows, n) == -(-n_rows // 16) * (n // 32) * block
    back = K.unpack_rows(tid, p, n_rows, n)
    assert np.array_equal(back, w.reshape(-1))


def test_pack_layout_interleaves_rows_by_four_bytes():
    """Q8_0 block 0 of group 0: 64-byte vector j holds, in 4-byte lane r, quants 4j..4j+3 of row r
    (+128); then the 16 rows' fp16 scales."""
    tid = TYPE_IDS["Q8_0"]
    w, _ = _case("Q8_0", 16, 32, 1, 3)
    p = K.pack_rows(tid, w, 32)
    qs = w[:, 2:34].view(np.int8)                                  # (16, 32)
    vec = p[:512].reshape(8, 16, 4)                                # (j, r, byte)
    assert np.array_equal(vec, (qs.reshape(16, 8, 4).transpose(1, 0, 2).astype(np.int16) + 128).astype(np.uint8))
    assert np.array_equal(p[512:544].reshape(16, 2), w[:, 0:2])


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_packed_matches_scalar_reference(name):
    """Same integer block sums as matvec_generic, a different float order: within 1e-5 of the
    magnitude (sum of |w x|), as the GGUF-layout fast products."""
    tid = TYPE_IDS[name]
    for n in (32, 224, 576, 1536):
        w, xq = _case(name, 37, n, 5, tid * 100 + n)
        pw, xp = _packed(name, w, n, xq)
        got = K.matmul_packed(tid, pw, 37, xp, n)
        for t in range(5):
            ref = K.matvec_generic(tid, w, xq[t], n)
            mag = np.abs(true_values(name, w).astype(np.float64)) @ np.abs(act_values(name, xq[t]))
            bad = np.abs(got[t].astype(np.float64) - ref) > 1e-5 * mag + 1e-30
            assert not bad.any(), (name, n, t, np.flatnonzero(bad), got[t][bad], ref[bad])


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_packed_bitwise_whatever_n_tok_and_row_range(name):
    """Every (token, row) is the same float for 1..17 tokens (token tiles of 8 and a remainder) and
    row ranges starting at group boundaries, ending anywhere (odd row count: a padded last group)."""
    tid = TYPE_IDS[name]
    n, n_rows = 224, 53
    w, xq = _case(name, n_rows, n, 17, tid)
    pw, xp = _packed(name, w, n, xq)
    single = np.stack([K.matmul_packed(tid, pw, n_rows, xp[t:t + 1], n)[0] for t in range(17)])
    for r0, r1 in [(0, n_rows), (16, 33), (48, 53), (0, 1), (32, 32), (16, 48)]:
        for n_tok in (1, 2, 4, 7, 8, 9, 17):
            got = K.matmul_packed(tid, pw, n_rows, xp[:n_tok], n, r0, r1)
            assert got.shape == (n_tok, r1 - r0)
            assert np.array_equal(got, single[:n_tok, r0:r1]), (name, r0, r1, n_tok)


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_packed_across_activation_tiles_bitwise(name):
    """Long rows: 256 KiB of prepared activations hold ~40 tokens, so 60 tokens cross two tiles."""
    tid = TYPE_IDS[name]
    n = 8192
    w, xq = _case(name, 20, n, 60, tid + 7)
    pw, xp = _packed(name, w, n, xq)
    got = K.matmul_packed(tid, pw, 20, xp, n)
    want = np.stack([K.matmul_packed(tid, pw, 20, xp[t:t + 1], n)[0] for t in range(60)])
    assert np.array_equal(got, want)


@pytest.mark.parametrize("name", PACKED_TYPES)
def test_padding_never_leaks(name):
    """Rows past r1 in the last group are not written: the output buffer's other columns keep their
    values, and 17 rows give the same first 17 results as the same rows inside 32."""
    tid = TYPE_IDS[name]
    n = 64
    w, xq = _case(name, 32, n, 3, tid + 11)
    pw32, xp = _packed(name, w, n, xq)
    pw17 = K.pack_rows(tid, w[:17], n)
    full = K.matmul_packed(tid, pw32, 32, xp, n)
    part = K.matmul_packed(tid, pw17, 17, xp, n)
    assert np.array_equal(part, full[:, :17])
    cut = K.matmul_packed(tid, pw32, 32, xp, n, 16, 20)          # stores rows 16..19 only
    assert np.array_equal(cut, full[:, 16:20])


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
    pw, xp = _packed("Q8_0", w, n, xq)
    got = K.matmul_packed(tid, pw, 16, xp, n)[0]
    ref = K.matvec_generic(tid, w, xq[0], n)
    assert np.allclose(got, ref, rtol=1e-6, atol=0), (got, ref)


def test_bad_arguments_raise():
    tid = TYPE_IDS["Q4_1"]
    w, xq = _case("Q4_1", 20, 64, 2, 1)
    pw, xp = _packed("Q4_1", w, 64, xq)
    with pytest.raises(ValueError, match="multiple of 16"):
        K.matmul_packed(tid, pw, 20, xp, 64, 3, 20)
    with pytest.raises(ValueError, match="packed weights hold"):
        K.matmul_packed(tid, pw[:-1], 20, xp, 64)
    with pytest.raises(ValueError, match="no packed products for type Q4_0"):
        K.pack_rows(TYPE_IDS["Q4_0"], np.zeros(18 * 2, np.uint8), 64)
    with pytest.raises(ValueError, match="xp must be"):
        K.matmul_packed(tid, pw, 20, xq, 64)
