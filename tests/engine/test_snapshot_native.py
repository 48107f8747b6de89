"""The restorer's native path: `Engine.kv_write_checked` (a chunk's CRC and its copy in one call) and
restoring the prefix of an image that fits a smaller context (whole chunks).

Not here: the CRC itself (tests/native/test_crc32.py), the ladder and refusals (test_snapshot.py).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from strata.engine import Engine, snapshot
from strata.engine.snapshot import SnapshotError

N_TOKENS = 600  # 3 chunks of 256, 256, 88 tokens


@pytest.fixture(scope="module")
def model_path(tiny_model_factory):
    return tiny_model_factory(dtype="Q8_0", seed=4, n_layer=2, ctx_len=1024)


@pytest.fixture(scope="module")
def engine(model_path):
    e = Engine(model_path, n_ctx=1024, n_slots=1, n_threads=2)
    e.prefill(0, np.random.default_rng(1).integers(3, 512, N_TOKENS).tolist())
    return e


@pytest.fixture(scope="module")
def image(engine):
    return engine.snapshot(0)


def test_kv_write_checked_writes_only_a_matching_chunk(engine):
    tokens = engine.context_tokens(0)[:40]
    kv = engine.kv_read(0, 0, 40)
    engine.truncate(1, 0)
    assert engine.kv_write_checked(1, tokens, kv, zlib.crc32(kv) ^ 1) is False
    assert engine.context_len(1) == 0
    assert engine.kv_write_checked(1, tokens, memoryview(kv), zlib.crc32(kv)) is True
    assert engine.context_tokens(1) == tokens and engine.kv_read(1, 0, 40) == kv
    with pytest.raises(ValueError, match="need"):
        engine.kv_write_checked(1, tokens, kv[:-1], zlib.crc32(kv[:-1]))


@pytest.mark.parametrize("capacity, restored", [(256, 256), (511, 256), (512, 512), (599, 512), (600, 600)])
def test_a_longer_image_restores_the_whole_chunks_that_fit(model_path, engine, image, capacity, restored):
    small = Engine(model_path, n_ctx=capacity, n_threads=1)
    assert small.restore(0, image) == restored
    assert small.context_tokens(0) == engine.context_tokens(0)[:restored]
    assert small.kv_read(0, 0, restored) == engine.kv_read(0, 0, restored)


def test_prefix_restore_streams_in_odd_pieces(model_path, engine, image):
    small = Engine(model_path, n_ctx=300, n_threads=1)
    r = small.restorer(0)
    for at in range(0, len(image), 7777):
        r.feed(image[at : at + 7777])
    assert r.finish() == 256
    assert small.kv_read(0, 0, 256) == engine.kv_read(0, 0, 256)


def test_a_damaged_chunk_inside_the_prefix_still_ends_it(model_path, image):
    h = snapshot.read_header(image)
    bad = bytearray(image)
    bad[h.header_size + h.chunk_bytes(0) + 5] ^= 0xFF  # inside chunk 1
    assert Engine(model_path, n_ctx=520, n_threads=1).restore(0, bytes(bad)) == 256


def test_a_context_smaller_than_one_chunk_is_refused(model_path, image):
    with pytest.raises(SnapshotError, match="not even one chunk fits"):
        Engine(model_path, n_ctx=100, n_threads=1).restore(0, image)


@pytest.mark.parametrize("kv_type", ["f16", "f32"])
def test_kv_moves_in_unaligned_pieces_keep_the_logits(model_path, kv_type):
    """Tiled K (head size a multiple of 16) copied to and from rows at positions off the 16-token
    tiles: the bytes come back the same and a continued prefill gives the same logits."""
    e = Engine(model_path, n_ctx=128, n_slots=1, n_threads=1, kv_type=kv_type)
    assert e.head_dim % 16 == 0
    prompt = np.random.default_rng(3).integers(3, 512, 45).tolist()
    e.prefill(0, prompt)
    e.truncate(1, 0)
    for t0, t1 in ((0, 5), (5, 21), (21, 45)):
        kv = e.kv_read(0, t0, t1)
        assert e.kv_write_checked(1, prompt[t0:t1], kv, zlib.crc32(kv))
    assert e.kv_read(1, 0, 45) == e.kv_read(0, 0, 45)
    e.prefill(0, [7, 8])
    e.prefill(1, [7, 8])
    assert np.array_equal(e.logits(1), e.logits(0))
