"""Native CRC32 (strata._engine.crc32, binding-snapshot.cpp): equal to zlib.crc32 bit for bit, for
every implementation this CPU runs (table, pclmul, vpclmul), on random buffers of many sizes, start
alignments and initial values; bad arguments are refused with a clear error.

Not here: the snapshot restorer that uses it (tests/engine/test_snapshot_native.py).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from strata import _engine

ORDER = ("table", "pclmul", "vpclmul")
IMPLS = ORDER[: ORDER.index(_engine.crc32_impl()) + 1]
# every size up to 700 crosses each path's block thresholds (16, 64, 256 bytes) and tails; then
# sizes around the 64 KiB GIL-release bound and a few larger ones
SIZES = [*range(0, 700), 1023, 4096, 4099, 65535, 65536, 65537, 1 << 20, (1 << 20) + 77, 3 * (1 << 20) + 13]


@pytest.mark.parametrize("impl", IMPLS)
def test_equals_zlib_on_random_buffers(impl):
    rng = np.random.default_rng(6)
    pool = rng.integers(0, 256, max(SIZES) + 64, dtype=np.uint8).tobytes()
    view = memoryview(pool)
    for i, size in enumerate(SIZES):
        for align in (0, 1, 3, 7, 8, 13) if size < 100_000 else (0, 5):
            start = align + (i % 3) * 16
            data = view[start : start + size]
            value = int(rng.integers(0, 2**32))
            got = _engine.crc32_with(impl, data, value)
            assert got == zlib.crc32(data, value), (impl, size, align, value)
        assert _engine.crc32_with(impl, view[:size]) == zlib.crc32(view[:size]), (impl, size)


def test_default_is_the_best_path_and_chains_like_zlib():
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 5_000_001, dtype=np.uint8).tobytes()
    assert _engine.crc32(data) == zlib.crc32(data)
    running = 0
    for cut in range(0, len(data), 1_234_567):
        running = _engine.crc32(data[cut : cut + 1_234_567], running)
    assert running == zlib.crc32(data)


def test_takes_the_buffers_the_cache_passes():
    payload = bytes(range(256)) * 1000
    for buf in (payload, bytearray(payload), memoryview(payload)[3:], np.frombuffer(payload, np.uint8)):
        assert _engine.crc32(buf) == zlib.crc32(buf)
    words = np.arange(1000, dtype=np.uint32)
    assert _engine.crc32(words) == zlib.crc32(words.tobytes())
    assert _engine.crc32(b"") == 0 and _engine.crc32(b"", 12345) == 12345


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="C-contiguous"):
        _engine.crc32(memoryview(bytes(100))[::2])
    with pytest.raises(ValueError, match="unknown implementation 'sse9'"):
        _engine.crc32_with("sse9", b"abc")
    with pytest.raises(TypeError):
        _engine.crc32("text is not bytes")
