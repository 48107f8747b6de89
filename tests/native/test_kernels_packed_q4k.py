"""Row-interleaved ("packed") Q4_K weights (quants-packed.h): packing round-trips to the GGUF bytes
and unpacks the 6-bit scales / mins to the values gguf reads, prepared Q8_K activations carry the
same numbers, the packed products equal the scalar reference within the products' tolerance
(super-block counts 1, 2, 8, 11), a result is bit for bit the same whatever n_tok, the row range or
the token tiling, padding rows never reach an output, and the int16 steps hold at the extremes.
Skipped in builds without packed products (no AVX-512 VNNI)."""

from __future__ import annotations

import numpy as np
import pytest

from .kernel_data import TYPE_IDS, K, act_values, random_activations, random_weights, true_values

TID = TYPE_IDS["Q4_K"]
BLOCK = 2368           # packed bytes of 16 rows x one super-block
ACT_BLOCK = 288        # prepared bytes of one Q8_K super-block

pytestmark = pytest.mark.skipif(not K.packed_supported(TID),
                                reason=f"no packed Q4_K products in this {K.simd_name()} build")


def _case(n_rows, n, n_tok, seed):
    rng = np.random.default_rng(seed)
    w = random_weights(rng, "Q4_K", n_rows, n)
    xq = K.quantize_act_row(TID, random_activations(rng, n_tok, n))
    return w, xq


def _packed(w, n, xq):
    return K.pack_rows(TID, w, n), K.prepare_act_packed(TID, xq, n)


@pytest.mark.parametrize("n_rows", [1, 15, 16, 17, 37])
def test_pack_round_trip(n_rows):
    """unpack(pack(w)) gives the GGUF rows back byte for byte (the 6-bit scale repacking is exact);
    the packed size is whole groups of 2368-byte blocks (+2.8% over 16 x 144)."""
    n = 512
    w, _ = _case(n_rows, n, 1, n_rows)
    p = K.pack_rows(TID, w, n)
    assert p.size == K.packed_bytes(TID, n_rows, n) == -(-n_rows // 16) * (n // 256) * BLOCK
    assert np.array_equal(K.unpack_rows(TID, p, n_rows, n), w.reshape(-1))


def test_packed_block_holds_the_gguf_values():
    """Rebuilding every element of group 0 / super-block 1 from the packed block alone (nibbles at
    [j][r], d, dmin, byte scales [s][r], byte mins [k][r][2]) gives gguf's dequantized values."""
    n = 512
    w, _ = _case(16, n, 1, 7)
    blk = K.pack_rows(TID, w, n)[BLOCK:2 * BLOCK]                        # super-block 1 of group 0
    qs = blk[:2048].reshape(32, 16, 4).transpose(1, 0, 2).reshape(16, 128)   # (r, GGUF qs byte)
    d = blk[2048:2080].view("<f2").astype(np.float32)
    dmin = blk[2080:2112].view("<f2").astype(np.float32)
    sc = blk[2112:2240].reshape(8, 16).T.astype(np.float32)             # (r, sub-block)
    mn = blk[2240:2368].reshape(4, 16, 2).transpose(1, 0, 2).reshape(16, 8).astype(np.float32)
    q = np.empty((16, 256), np.float32)
    for g in range(4):
        q[:, 64 * g:64 * g + 32] = qs[:, 32 * g:32 * g + 32] & 15
        q[:, 64 * g + 32:64 * g + 64] = qs[:, 32 * g:32 * g + 32] >> 4
    sub = np.arange(256) // 32
    got = d[:, None] * sc[:, sub] * q - dmin[:, None] * mn[:, sub]
    want = true_values("Q4_K", w)[:, 256:512]
    assert np.allclose(got, want, rtol=1e-6, atol=0)


def test_prepared_activations_carry_q8k_numbers():
    """288 bytes a super-block: the Q8_K qs, its float d, the int16 sums of 32 (pairs of bsums)."""
    n = 512
    _, xq = _case(1, n, 2, 3)
    xp = K.prepare_act_packed(TID, xq, n)
    assert xp.shape == (2, 2 * ACT_BLOCK)
    for t in range(2):
        src, dst = xq[t].reshape(2, 292), xp[t].reshape(2, ACT_BLOCK)
        assert np.array_equal(dst[:, :256], src[:, 4:260])
        assert np.array_equal(dst[:, 256:260], src[:, 0:4])
        bsums = src[:, 260:292].copy().view("<i2").reshape(2, 8, 2).sum(axis=2)
        assert np.array_equal(dst[:, 260:276].copy().view("<i2"), bsums)
        assert not dst[:, 276:].any()


@pytest.mark.parametrize("n", [256, 512, 2048, 2816])
def test_packed_matches_scalar_reference(n):
    """Same integer sums as matvec_generic, a different float order: within 1e-5 of the magnitude
    (sum of |w x|), as the GGUF-layout fast products."""
    w, xq = _case(37, n, 5, n)
    pw, xp = _packed(w, n, xq)
    got = K.matmul_packed(TID, pw, 37, xp, n)
    tv = np.abs(true_values("Q4_K", w).astype(np.float64))
    for t in range(5):
        ref = K.matvec_generic(TID, w, xq[t], n)
        mag = tv @ np.abs(act_values("Q4_K", xq[t]))
        bad = np.abs(got[t].astype(np.float64) - ref) > 1e-5 * mag + 1e-30
        assert not bad.any(), (n, t, np.flatnonzero(bad), got[t][bad], ref[bad])


def test_packed_bitwise_whatever_n_tok_and_row_range():
    """Every (token, row) is the same float for 1..17 tokens (token tiles of 8 and a remainder) and
    row ranges starting at group boundaries, ending anywhere (odd row count: a padded last group)."""
    n, n_rows = 512, 53
    w, xq = _case(n_rows, n, 17, 21)
    pw, xp = _packed(w, n, xq)
    single = np.stack([K.matmul_packed(TID, pw, n_rows, xp[t:t + 1], n)[0] for t in range(17)])
    for r0, r1 in [(0, n_rows), (16, 33), (48, 53), (0, 1), (32, 32), (16, 48)]:
        for n_tok in (1, 2, 4, 7, 8, 9, 17):
            got = K.matmul_packed(TID, pw, n_rows, xp[:n_tok], n, r0, r1)
            assert got.shape == (n_tok, r1 - r0)
            assert np.array_equal(got, single[:n_tok, r0:r1]), (r0, r1, n_tok)


def test_packed_across_activation_tiles_bitwise():
    """Long rows: 256 KiB of prepared activations hold 24 tokens of 8192, so 60 tokens cross tiles."""
    n = 8192
    w, xq = _case(20, n, 60, 8)
    pw, xp = _packed(w, n, xq)
    got = K.matmul_packed(TID, pw, 20, xp, n)
    want = np.stack([K.matmul_packed(TID, pw, 20, xp[t:t + 1], n)[0] for t in range(60)])
    assert np.array_equal(got, want)


def test_padding_never_leaks():
    """Rows past r1 in the last group are not written, and 17 rows give the same first 17 results
    as the same rows inside 32."""
    n = 256
    w, xq = _case(32, n, 3, 11)
    pw32, xp = _packed(w, n, xq)
    pw17 = K.pack_rows(TID, w[:17], n)
    full = K.matmul_packed(TID, pw32, 32, xp, n)
    assert np.array_equal(K.matmul_packed(TID, pw17, 17, xp, n), full[:, :17])
    assert np.array_equal(K.matmul_packed(TID, pw32, 32, xp, n, 16, 20), full[:, 16:20])


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_extremes_fit_the_int16_steps(sign):
    """Every quant 15, every scale and min 63, activations all +-127: each 16-element sum is
    +-30480 (the vpdpwssd's int16 operand) and each sub-block sum +-4064; the packed product is
    the scalar one up to float rounding (a wrapped int16 would be off by 65536 * 63 * d)."""
    n = 512
    blk = np.zeros(144, np.uint8)
    blk[0:2] = np.array([1.0], "<f2").view(np.uint8)
    blk[2:4] = np.array([0.5], "<f2").view(np.uint8)
    blk[4:16] = 0xFF                                   # all 6-bit scales and mins 63
    blk[16:] = 0xFF                                    # all quants 15
    w = np.tile(blk, (16, n // 256))
    xq = K.quantize_act_row(TID, np.full((1, n), sign, np.float32))
    assert np.all(np.abs(xq[0].reshape(-1, 292)[:, 4:260].view(np.int8)) == 127)
    pw, xp = _packed(w, n, xq)
    got = K.matmul_packed(TID, pw, 16, xp, n)[0]
    ref = K.matvec_generic(TID, w, xq[0], n)
    assert np.allclose(got, ref, rtol=1e-6, atol=0), (got, ref)
    assert np.allclose(got, sign * n * (63 * 15 - 0.5 * 63), rtol=1e-5)


def test_bad_arguments_raise():
    w, xq = _case(20, 512, 2, 1)
    pw, xp = _packed(w, 512, xq)
    with pytest.raises(ValueError, match="multiple of 256"):
        K.packed_bytes(TID, 16, 288)
    with pytest.raises(ValueError, match="multiple of 16"):
        K.matmul_packed(TID, pw, 20, xp, 512, 3, 20)
    with pytest.raises(ValueError, match="packed weights hold"):
        K.matmul_packed(TID, pw[:-1], 20, xp, 512)
    with pytest.raises(ValueError, match="xp must be"):
        K.matmul_packed(TID, pw, 20, xq, 512)
