"""Engine.extend (lookup decoding's draft check) on the CUDA backend: the logits after every token equal
one decode per token bit for bit, for 1 to 32 tokens (the decode product kernel up to 16 rows with
logits, the prefill one above), and truncate + decode afterwards equals never having fed the tail.
Skipped without a CUDA build and device; `STRATA_TEST_GPU_BACKEND=cpu` runs it on the CPU backend.

Not here: the CPU backend's own check (tests/engine/test_extend.py), the other GPU parity tests
(test_parity.py).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from strata.engine import Engine
from strata.engine.gpu import cuda_built, cuda_devices

from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

BACKEND = os.environ.get("STRATA_TEST_GPU_BACKEND", "cuda")
pytestmark = pytest.mark.skipif(BACKEND == "cuda" and not (cuda_built() and cuda_devices()),
                                reason="needs a CUDA build (-Ccmake.define.STRATA_CUDA=ON) and a CUDA device")

HISTORY = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8]
DRAFT = [(7 * i + 11) % 500 for i in range(32)]


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    return Engine(tiny_model_factory(dtype="Q4_K", seed=4, **K_QUANT_SHAPE), n_ctx=256, n_threads=2, backend=BACKEND)


@pytest.mark.parametrize("n", [1, 5, 16, 17, 32])
def test_extend_equals_one_decode_per_token(engine, n):
    engine.truncate(0, 0)
    engine.prefill(0, HISTORY)
    want = np.stack([engine.decode([0], [t])[0] for t in DRAFT[:n]])
    engine.truncate(0, len(HISTORY))
    got = engine.extend([(0, DRAFT[:n])])
    assert np.array_equal(got, want)
    engine.truncate(0, len(HISTORY) + n // 2)
    after = engine.decode([0], [DRAFT[n // 2]])[0]
    assert np.array_equal(after, want[n // 2])
