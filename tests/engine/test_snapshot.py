"""Snapshot images: the restore ladder (longest valid prefix of whole chunks), streaming restore in
pieces of any size, and refusal of damaged headers, other models' and other layouts' images.

Not here: logits parity after restore (test_bitwise.py).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from strata.engine import Engine, snapshot
from strata.engine.snapshot import SnapshotError

N_TOKENS = 600  # 3 chunks of 256, 256, 88 tokens


@pytest.fixture(scope="module")
def model_path(tiny_model_factory):
    return tiny_model_factory(dtype="Q8_0", seed=4, n_layer=1, ctx_len=1024)


@pytest.fixture(scope="module")
def engine(model_path):
    e = Engine(model_path, n_ctx=1024, n_slots=2, n_threads=2)
    rng = np.random.default_rng(0)
    e.prefill(0, rng.integers(3, 512, N_TOKENS).tolist())
    return e


@pytest.fixture(scope="module")
def image(engine):
    return engine.snapshot(0)


def chunk_offsets(image: bytes) -> list[int]:
    h = snapshot.read_header(image)
    offs, at = [], h.header_size
    for i in range(h.n_chunks):
        offs.append(at)
        at += h.chunk_bytes(i)
    assert at == len(image) == h.image_bytes
    return offs


def test_header_describes_the_image(engine, image):
    h = snapshot.read_header(image[:200_000])
    assert h.model_id == engine.model_id and h.n_tokens == N_TOKENS
    assert list(h.tokens) == engine.context_tokens(0)
    assert h.kv_layout() == engine.kv_layout() and h.n_chunks == 3 and h.chunk_tokens == 256
    assert snapshot.validate([image]) == N_TOKENS


def test_pieces_are_bounded_and_join_to_the_image(engine, image):
    pieces = list(engine.snapshot_chunks(0))
    assert all(len(p) <= snapshot.MAX_PIECE_BYTES for p in pieces)
    assert b"".join(pieces) == image


def test_streaming_restore_in_any_piece_sizes(engine, image):
    rng = np.random.default_rng(1)
    cuts = sorted(rng.integers(0, len(image), 40).tolist())
    r = engine.restorer(1)
    prev = 0
    for c in cuts + [len(image)]:
        r.feed(image[prev:c])
        prev = c
    assert r.finish() == N_TOKENS
    assert engine.context_tokens(1) == engine.context_tokens(0)
    assert engine.kv_read(1, 0, N_TOKENS) == engine.kv_read(0, 0, N_TOKENS)


def test_partial_snapshot(engine):
    part = engine.snapshot(0, 300)
    assert engine.restore(1, part) == 300
    assert engine.context_tokens(1) == engine.context_tokens(0)[:300]


@pytest.mark.parametrize("cut_into_chunk, expected", [(0, 0), (1, 256), (2, 512)])
def test_truncated_image_restores_whole_chunks(engine, image, cut_into_chunk, expected):
    offs = chunk_offsets(image)
    cut = offs[cut_into_chunk] + 1000
    assert engine.restore(1, image[:cut]) == expected
    assert snapshot.validate([image[:cut]]) == expected
    assert engine.context_len(1) == expected
    assert engine.kv_read(1, 0, expected) == engine.kv_read(0, 0, expected)


@pytest.mark.parametrize("damaged_chunk, expected", [(0, 0), (1, 256), (2, 512)])
def test_flipped_byte_stops_the_ladder_at_its_chunk(engine, image, damaged_chunk, expected):
    offs = chunk_offsets(image)
    bad = bytearray(image)
    bad[offs[damaged_chunk] + 77] ^= 0x40
    assert engine.restore(1, bytes(bad)) == expected
    assert snapshot.validate([bytes(bad)]) == expected


@pytest.mark.parametrize("at, match", [(0, "bad magic"), (8, "version"), (12, "damaged"), (20, "CRC"),
                                       (60, "CRC"), (100, "CRC"), (-1, "CRC")])
def test_damaged_header_is_refused(engine, image, at, match):
    h = snapshot.read_header(image)
    pos = at if at >= 0 else h.header_size - 1
    bad = bytearray(image)
    bad[pos] ^= 0x01
    before = engine.context_tokens(1)
    with pytest.raises(SnapshotError, match=match):
        engine.restore(1, bytes(bad))
    assert engine.context_tokens(1) == before  # a refused image leaves the context alone
    with pytest.raises(SnapshotError, match=match):
        snapshot.validate([bytes(bad)])


def test_truncated_header_is_refused(engine, image):
    for cut in (0, 10, 60, 500):
        with pytest.raises(SnapshotError, match="truncated"):
            engine.restore(1, image[:cut])


def test_other_model_is_refused(tiny_model_factory, image):
    other = Engine(tiny_model_factory(dtype="Q8_0", seed=5, n_layer=1, ctx_len=1024), n_ctx=1024, n_threads=1)
    with pytest.raises(SnapshotError, match="another model"):
        other.restore(0, image)


def test_other_layout_is_refused(model_path, image):
    q8 = Engine(model_path, n_ctx=1024, n_threads=1, kv_type="f32")
    with pytest.raises(SnapshotError, match="KV layout"):
        q8.restore(0, image)


def test_too_large_for_the_context_is_refused(model_path, image):
    small = Engine(model_path, n_ctx=100, n_threads=1)
    with pytest.raises(SnapshotError, match="capacity 100"):
        small.restore(0, image)


def test_absurd_token_count_is_refused_before_reading_on(image):
    bad = bytearray(image[:200])
    struct.pack_into("<Q", bad, 76, 2**40)
    with pytest.raises(SnapshotError, match="absurd token count"):
        snapshot.read_header(bytes(bad))
