"""kernels.attention_scores (a decode step's K scores alone: attention_scores_part over every tile, the kernel
benchmarks/q8_scores_ab.py times) against the NumPy reference's scores (the query as the kernels read it times K
as stored, times the scale), f16 and q8_0 KV at SmolLM2's head size and 1-5 query heads (4 a pass, then the
rest); `repeat` gives the same floats; bad arguments are refused, naming the value."""

from __future__ import annotations

import numpy as np
import pytest

from .attention_reference import F16, F32, Q8_0, K, make_kv, query_as_read


@pytest.mark.parametrize("kv_type", [F16, Q8_0])
@pytest.mark.parametrize("n_rep", [1, 3, 5])
def test_scores_equal_the_reference(kv_type, n_rep):
    rng = np.random.default_rng(10 * kv_type + n_rep)
    case = make_kv(rng, kv_type, 2, 64, 70)
    q = rng.standard_normal((n_rep, 64)).astype(np.float32)
    got = K.attention_scores(kv_type, 2, 64, case.k_buf, q, 1, 70, 0.125)
    assert got.shape == (n_rep, 80)   # 70 positions in whole tiles of 16
    ref = (query_as_read(kv_type, q) @ case.k[:, 64:].T) * 0.125
    np.testing.assert_allclose(got[:, :70], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(K.attention_scores(kv_type, 2, 64, case.k_buf, q, 1, 70, 0.125, 3), got)


def test_bad_arguments_are_named():
    rng = np.random.default_rng(1)
    case = make_kv(rng, Q8_0, 1, 64, 20)
    q = np.zeros((3, 64), np.float32)
    with pytest.raises(ValueError, match="repeat 0"):
        K.attention_scores(Q8_0, 1, 64, case.k_buf, q, 0, 20, 0.125, 0)
    with pytest.raises(ValueError, match=r"q must be \(n_rep, 64\)"):
        K.attention_scores(Q8_0, 1, 64, case.k_buf, q[:, :32], 0, 20, 0.125)
    with pytest.raises(ValueError, match="kv head 1"):
        K.attention_scores(Q8_0, 1, 64, case.k_buf, q, 1, 20, 0.125)
    with pytest.raises(ValueError, match="n_pos 0"):
        K.attention_scores(Q8_0, 1, 64, case.k_buf, q, 0, 0, 0.125)
    with pytest.raises(ValueError, match="attention_scores"):   # more positions than the buffer holds
        K.attention_scores(Q8_0, 1, 64, case.k_buf, q, 0, 400, 0.125)
    f32 = make_kv(rng, F32, 1, 64, 20)
    with pytest.raises(ValueError, match="attention_split_ok"):
        K.attention_scores(F32, 1, 64, f32.k_buf, q, 0, 20, 0.125)
