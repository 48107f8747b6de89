"""Checks shared by the packed-product kernel tests (test_kernels_packed.py for Q4_1 / Q8_0,
test_kernels_packed_kquants.py and the per-type K-quant files): each takes a GGUF type name and
asserts what quants-packed.h promises for every packed type: the round trip to the GGUF bytes,
agreement with the scalar reference within the products' tolerance, results bit for bit the same
whatever n_tok, the row range or the token tiling, and padding rows that never reach an output.
Not here: each type's layout and extremes (its own file), the tests themselves."""

from __future__ import annotations

import numpy as np

from .kernel_data import TYPE_IDS, K, act_values, random_activations, random_weights, true_values


def case(name: str, n_rows: int, n: int, n_tok: int, seed: int):
    """(w, xq): random (n_rows, n) `name` weights and n_tok of its quantized activation rows."""
    rng = np.random.default_rng(seed)
    w = random_weights(rng, name, n_rows, n)
    xq = K.quantize_act_row(TYPE_IDS[name], random_activations(rng, n_tok, n))
    return w, xq


def packed(name: str, w: np.ndarray, n: int, xq: np.ndarray):
    """(packed weights, prepared activations)."""
    tid = TYPE_IDS[name]
    return K.pack_rows(tid, w, n), K.prepare_act_packed(tid, xq, n)


def check_round_trip(name: str, n_rows: int, n: int, block_elems: int, block_bytes: int) -> None:
    """unpack(pack(w)) is w byte for byte; the size is whole groups of 16 rows, block_bytes per block."""
    tid = TYPE_IDS[name]
    w, _ = case(name, n_rows, n, 1, n_rows)
    p = K.pack_rows(tid, w, n)
    assert p.size == K.packed_bytes(tid, n_rows, n) == -(-n_rows // 16) * (n // block_elems) * block_bytes
    assert np.array_equal(K.unpack_rows(tid, p, n_rows, n), w.reshape(-1))


def check_matches_scalar(name: str, n: int, seed: int) -> None:
    """37 rows (a padded last group), 5 tokens: within 1e-5 of the magnitude (sum of |w x|) of
    matvec_generic, as the GGUF-layout fast products."""
    tid = TYPE_IDS[name]
    w, xq = case(name, 37, n, 5, seed)
    pw, xp = packed(name, w, n, xq)
    got = K.matmul_packed(tid, pw, 37, xp, n)
    tv = np.abs(true_values(name, w).astype(np.float64))
    for t in range(5):
        ref = K.matvec_generic(tid, w, xq[t], n)
        mag = tv @ np.abs(act_values(name, xq[t]))
        bad = np.abs(got[t].astype(np.float64) - ref) > 1e-5 * mag + 1e-30
        assert not bad.any(), (name, n, t, np.flatnonzero(bad), got[t][bad], ref[bad])


def check_bitwise_n_tok_and_row_range(name: str, n: int, seed: int) -> None:
    """Every (token, row) is the same float for 1..17 tokens (token tiles of 8 and a remainder) and
    row ranges starting at group boundaries, ending anywhere (53 rows: a padded last group)."""
    tid, n_rows = TYPE_IDS[name], 53
    w, xq = case(name, n_rows, n, 17, seed)
    pw, xp = packed(name, w, n, xq)
    single = np.stack([K.matmul_packed(tid, pw, n_rows, xp[t:t + 1], n)[0] for t in range(17)])
    for r0, r1 in [(0, n_rows), (16, 33), (48, 53), (0, 1), (32, 32), (16, 48)]:
        for n_tok in (1, 2, 4, 7, 8, 9, 17):
            got = K.matmul_packed(tid, pw, n_rows, xp[:n_tok], n, r0, r1)
            assert got.shape == (n_tok, r1 - r0)
            assert np.array_equal(got, single[:n_tok, r0:r1]), (name, r0, r1, n_tok)


def check_across_activation_tiles(name: str, seed: int) -> None:
    """Rows of 8192: a 256 KiB tile of prepared activations holds 24 (K-quants) to ~40 tokens, so 60
    tokens cross tiles."""
    tid, n = TYPE_IDS[name], 8192
    w, xq = case(name, 20, n, 60, seed)
    pw, xp = packed(name, w, n, xq)
    got = K.matmul_packed(tid, pw, 20, xp, n)
    want = np.stack([K.matmul_packed(tid, pw, 20, xp[t:t + 1], n)[0] for t in range(60)])
    assert np.array_equal(got, want)


def check_padding_never_leaks(name: str, n: int, seed: int) -> None:
    """Rows past r1 in the last group are not written, and 17 rows give the same first 17 results
    as the same rows inside 32."""
    tid = TYPE_IDS[name]
    w, xq = case(name, 32, n, 3, seed)
    pw32, xp = packed(name, w, n, xq)
    pw17 = K.pack_rows(tid, w[:17], n)
    full = K.matmul_packed(tid, pw32, 32, xp, n)
    assert np.array_equal(K.matmul_packed(tid, pw17, 17, xp, n), full[:, :17])
    assert np.array_equal(K.matmul_packed(tid, pw32, 32, xp, n, 16, 20), full[:, 16:20])   # rows 16..19 only


def constant_row_products(name: str, blk: np.ndarray, n: int, sign: float):
    """(packed, scalar) products of 16 rows repeating the K-quant super-block `blk` (GGUF bytes) with
    one activation row of all `sign`, quantized to +-127 (checked): the extremes tests' setting."""
    tid = TYPE_IDS[name]
    w = np.tile(blk, (16, n // 256))
    xq = K.quantize_act_row(tid, np.full((1, n), sign, np.float32))
    assert np.all(np.abs(xq[0].reshape(-1, 292)[:, 4:260].view(np.int8)) == 127)
    pw, xp = packed(name, w, n, xq)
    return K.matmul_packed(tid, pw, 16, xp, n)[0], K.matvec_generic(tid, w, xq[0], n)


def prepared_q8k_blocks(name: str, act_block: int):
    """(src, dst): 2 tokens x 2 super-blocks of Q8_K activations, (4, 292) uint8, and their prepared
    blocks for `name`, (4, act_block) uint8 (the packed row length checked)."""
    tid, n = TYPE_IDS[name], 512
    _, xq = case(name, 1, n, 2, 3)
    xp = K.prepare_act_packed(tid, xq, n)
    assert xp.shape == (2, 2 * act_block)
    return xq.reshape(4, 292), xp.reshape(4, act_block)


def assert_prepared_with_offset_sums(name: str, act_block: int, offset: int) -> None:
    """The prepared layout of Q3_K and Q6_K (336 bytes a super-block): the Q8_K qs, int32 -offset * each
    bsum (the quants' offset folded in), its float d, 12 zero bytes."""
    src, dst = prepared_q8k_blocks(name, act_block)
    assert np.array_equal(dst[:, :256], src[:, 4:260])
    bsums = src[:, 260:292].copy().view("<i2").astype(np.int32)
    assert np.array_equal(dst[:, 256:320].copy().view("<i4"), -offset * bsums)
    assert np.array_equal(dst[:, 320:324], src[:, 0:4])
    assert not dst[:, 324:].any()

def q45k_values_from_packed(blk: np.ndarray) -> np.ndarray:
    """(16, 256) float32: the values of one packed Q4_K (2368 bytes) or Q5_K (2880) block rebuilt
    from its parts alone: nibbles at [j][r], d, dmin, byte scales [s][r], byte mins [k][r][2], and
    for Q5_K the qh bytes at [j][r] whose bit s is the fifth bit of sub-block s."""
    qs = blk[:2048].reshape(32, 16, 4).transpose(1, 0, 2).reshape(16, 128)   # (r, GGUF qs byte)
    d = blk[2048:2080].view("<f2").astype(np.float32)
    dmin = blk[2080:2112].view("<f2").astype(np.float32)
    sc = blk[2112:2240].reshape(8, 16).T.astype(np.float32)                 # (r, sub-block)
    mn = blk[2240:2368].reshape(4, 16, 2).transpose(1, 0, 2).reshape(16, 8).astype(np.float32)
    q = np.empty((16, 256), np.float32)
    for g in range(4):
        q[:, 64 * g:64 * g + 32] = qs[:, 32 * g:32 * g + 32] & 15
        q[:, 64 * g + 32:64 * g + 64] = qs[:, 32 * g:32 * g + 32] >> 4
    if blk.size == 2880:
        qh = blk[2368:2880].reshape(8, 16, 4).transpose(1, 0, 2).reshape(16, 32)   # (r, GGUF qh byte)
        for s in range(8):
            q[:, 32 * s:32 * s + 32] += 16 * ((qh >> s) & 1)
    sub = np.arange(256) // 32
    return d[:, None] * sc[:, sub] * q - dmin[:, None] * mn[:, sub]
