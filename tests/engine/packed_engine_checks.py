"""Checks shared by the engine tests of packed (row-interleaved) products (test_packed_q4k.py,
test_packed_kquant_mixes.py, test_packed_lowbit.py, tests/native/test_kernels_packed_engine.py): an engine's logits against the NumPy
reference within a tolerance of test_logits_reference.py's, and a batched decode bit for bit the
one-row decodes. Not here: which weights a model packs (each test file's own)."""

from __future__ import annotations

import numpy as np
from strata.engine import Engine

from tests.fixtures.reference import reference_logits


def packed_blocks(rows: int, cols: int) -> int:
    """Packed blocks of a (rows, cols) K-quant matrix: groups of 16 rows x super-blocks of 256."""
    return -(-rows // 16) * (cols // 256)


def check_logits_match_reference(model, tokens, n_vocab: int, rel_tol: float, pack_weights: bool = True) -> None:
    """Each position's largest logit error within rel_tol of its largest reference logit; cosine > 0.998.
    pack_weights False: the GGUF-layout products the packed ones replace."""
    ref = reference_logits(model, tokens)
    engine = Engine(model, n_ctx=64, n_threads=2, pack_weights=pack_weights)
    got = np.stack([engine.decode([0], [t])[0] for t in tokens])
    assert got.shape == ref.shape == (len(tokens), n_vocab)
    scale = np.abs(ref).max(axis=1)
    err = np.abs(got - ref).max(axis=1)
    assert np.all(err <= rel_tol * scale), (err / scale).max()
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.998


def check_batched_equals_single(model, prompts, n_threads: int) -> None:
    """Three contexts prefilled with the three prompts, decoded together, then one by one."""
    engine = Engine(model, n_ctx=64, n_slots=3, n_threads=n_threads)
    for c, p in enumerate(prompts, start=1):
        engine.prefill(c, p)
    batched = engine.decode([1, 2, 3], [11, 12, 13])
    for c, p in enumerate(prompts, start=1):
        engine.truncate(c, len(p))
    single = np.stack([engine.decode([c], [10 + c])[0] for c in (1, 2, 3)])
    assert np.array_equal(batched, single)
