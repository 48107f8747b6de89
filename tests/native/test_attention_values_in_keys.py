"""A KV cache whose values are its keys (kv_layout::v_in_k: deepseek2's latent row, read as K and as V),
through the kernel binding: no V buffer at all, and every output float the one a separate V buffer holding
the same rows gives, bitwise, whatever the layout (tiled f16 / f32, where the values are read by turning
each K tile's 16 positions into rows; the rows layout, where V's rows are K's), the head size (64, and
GLM-4.7-Flash's 576 = 512 latent + 64 rotated), the query heads per kv head (1 to 20, past the kernels'
blocks of 12 and 16), histories on and across tile boundaries, windows, and one long row in parts
(attention_in_parts, the engine's decode on several threads). Also against the NumPy reference, and the
layout refused for q8_0 by name.

Not here: the engine's forward pass over deepseek2 (tests/engine/test_deepseek2.py, whose f16 runs read
their values from K's tiles too).
"""

from __future__ import annotations

import numpy as np
import pytest

from .attention_reference import F16, F32, Q8_0, K, _stored, kv_case, reference

SCALE = 0.0625
LAYOUTS = [(F16, 64), (F16, 576), (F32, 64), (F32, 576), (F16, 40), (F32, 48)]   # tiled, then rows
N_POS = [1, 15, 16, 17, 161, 300]


def pack_shared(kv_type: int, head_dim: int, k: np.ndarray) -> np.ndarray:
    k_buf, v_buf = K.kv_pack(kv_type, 1, head_dim, k, k, values_in_keys=True)
    assert v_buf.size == 0   # no V buffer: the memory a latent cache saves
    return k_buf


@pytest.mark.parametrize("kv_type, head_dim", LAYOUTS, ids=lambda x: str(x))
@pytest.mark.parametrize("n_rep", [1, 3, 13, 20])
def test_values_read_from_the_keys_equal_a_separate_v_of_the_same_rows(kv_type, head_dim, n_rep):
    rng = np.random.default_rng(head_dim * 100 + n_rep)
    n = max(N_POS)
    k = rng.standard_normal((n, head_dim)).astype(np.float32)
    k_sep, v_sep = K.kv_pack(kv_type, 1, head_dim, k, k)   # the same rows twice: the old layout
    shared = pack_shared(kv_type, head_dim, k)
    assert np.array_equal(shared, k_sep)                  # K itself unchanged
    q = rng.standard_normal((n_rep, head_dim)).astype(np.float32)
    stored = _stored(kv_type, K.kv_rows(kv_type, 1, head_dim, k_sep, True, 0, n), head_dim)
    as_kv = kv_case(kv_type, 1, head_dim, k_sep, v_sep, stored, stored)   # the NumPy reference's view
    for n_pos in N_POS:
        for window in (0, 7, 33):
            want = K.attention_group(kv_type, 1, head_dim, k_sep, v_sep, q, 0, n_pos, SCALE, window)
            got = K.attention_group(kv_type, 1, head_dim, shared, shared, q, 0, n_pos, SCALE, window,
                                    values_in_keys=True)
            assert np.array_equal(got, want), (n_pos, window)
        np.testing.assert_allclose(got, reference(as_kv, q, 0, n_pos, SCALE, window), rtol=1e-4,
                                   atol=1e-5 * float(np.abs(got).max()))


@pytest.mark.parametrize("head_dim", [64, 576])
@pytest.mark.parametrize("n_rep", [3, 20])
def test_one_long_row_in_parts_reads_its_values_from_the_keys_bitwise(head_dim, n_rep):
    rng = np.random.default_rng(7 + head_dim + n_rep)
    n = 1100
    k = rng.standard_normal((n, head_dim)).astype(np.float32)
    shared = pack_shared(F16, head_dim, k)
    k_sep, v_sep = K.kv_pack(F16, 1, head_dim, k, k)
    q = rng.standard_normal((n_rep, head_dim)).astype(np.float32)
    for n_pos in (1, 17, 1024, 1100):
        whole = K.attention_group(F16, 1, head_dim, shared, shared, q, 0, n_pos, SCALE, values_in_keys=True)
        parts = K.attention_in_parts(F16, 1, head_dim, shared, shared, q, 0, n_pos, SCALE, n_parts=5,
                                     values_in_keys=True)
        separate = K.attention_in_parts(F16, 1, head_dim, k_sep, v_sep, q, 0, n_pos, SCALE, n_parts=5)
        assert np.array_equal(parts, whole) and np.array_equal(parts, separate), n_pos


def test_the_keys_really_are_the_values():
    """A separate V that differs from K gives another answer: the shared call reads K's rows as values."""
    rng = np.random.default_rng(3)
    k = rng.standard_normal((40, 64)).astype(np.float32)
    v = rng.standard_normal((40, 64)).astype(np.float32)
    q = rng.standard_normal((4, 64)).astype(np.float32)
    k_buf, v_buf = K.kv_pack(F16, 1, 64, k, v)
    other = K.attention_group(F16, 1, 64, k_buf, v_buf, q, 0, 40, SCALE)
    shared = K.attention_group(F16, 1, 64, k_buf, v_buf, q, 0, 40, SCALE, values_in_keys=True)
    k_buf2, v_buf2 = K.kv_pack(F16, 1, 64, k, k)
    assert not np.allclose(shared, other)
    assert np.array_equal(shared, K.attention_group(F16, 1, 64, k_buf2, v_buf2, q, 0, 40, SCALE))


def test_q8_0_has_no_values_in_keys_layout():
    k = np.zeros((4, 64), np.float32)
    with pytest.raises(ValueError, match="values are its keys.*f16 and f32 only"):
        K.kv_pack(Q8_0, 1, 64, k, k, values_in_keys=True)
