"""The native GGUF reader on malformed input: every defect raises GGUFError naming it, never a crash.

Not here: agreement with the gguf package on well-formed files (the fixtures' reader tests).
Files are written with the gguf package's writer, then damaged byte by byte.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strata.engine import GGUFError, GGUFFile


def write_small_gguf(path: Path) -> bytes:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("test.u32", 7)
    w.add_int8("test.i8", -3)
    w.add_float32("test.f32", 1.5)
    w.add_float64("test.f64", -2.25)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "héllo ✓")
    w.add_array("test.arr_str", ["a", "bc", ""])
    w.add_array("test.arr_int", [1, 2, 3])
    w.add_uint64("test.u64", 2**40)
    w.add_tensor("t.f32", np.arange(64, dtype=np.float32).reshape(2, 32))
    w.add_tensor("t.f16", np.ones((3, 32), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> tuple[Path, bytes]:
    path = tmp_path_factory.mktemp("gguf") / "small.gguf"
    return path, write_small_gguf(path)


def test_reads_values_and_tensors(small):
    path, data = small
    f = GGUFFile(path)
    md = f.metadata
    assert md["general.architecture"] == "llama"
    assert md["test.u32"] == 7 and md["test.i8"] == -3 and md["test.u64"] == 2**40
    assert md["test.f32"] == 1.5 and md["test.f64"] == -2.25 and md["test.bool"] is True
    assert md["test.str"] == "héllo ✓"
    assert md["test.arr_str"] == ["a", "bc", ""] and md["test.arr_int"] == [1, 2, 3]
    names = [t.name for t in f.tensors]
    assert names == ["t.f32", "t.f16"]
    t = f.tensors[0]
    assert t.shape == [32, 2] and t.type == "F32" and t.type_id == 0 and t.n_bytes == 256
    raw = np.frombuffer(data[t.offset : t.offset + t.n_bytes], dtype=np.float32)
    assert np.array_equal(raw, np.arange(64, dtype=np.float32))
    assert f.tensors[1].type == "F16" and f.tensors[1].n_bytes == 3 * 32 * 2


def test_agrees_with_gguf_package(small):
    path, _ = small
    ours = GGUFFile(path)
    ref = gguf.GGUFReader(str(path))
    assert set(ours.metadata) == set(ref.fields) - {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}
    for rt in ref.tensors:
        t = ours.tensor(rt.name)
        assert t.offset == rt.data_offset
        assert t.shape == [int(x) for x in rt.shape]
        assert t.n_bytes == rt.n_bytes


def load_bytes(tmp_path: Path, data: bytes) -> GGUFFile:
    p = tmp_path / "bad.gguf"
    p.write_bytes(data)
    return GGUFFile(p)


def test_every_truncation_is_refused(small, tmp_path):
    _, data = small
    for cut in range(len(data)):
        with pytest.raises(GGUFError, match=r"truncated|past the end|absurd|not a GGUF"):
            load_bytes(tmp_path, data[:cut])


@pytest.mark.parametrize(
    "offset, value, message",
    [
        (0, b"GGUX", "bad magic"),
        (4, struct.pack("<I", 1), "unsupported GGUF version 1"),
        (4, struct.pack("<I", 99), "unsupported GGUF version 99"),
        (8, struct.pack("<Q", 2**60), "absurd tensor count"),
        (16, struct.pack("<Q", 2**60), "absurd metadata count"),
    ],
)
def test_header_defects(small, tmp_path, offset, value, message):
    _, data = small
    bad = data[:offset] + value + data[offset + len(value) :]
    with pytest.raises(GGUFError, match=message):
        load_bytes(tmp_path, bad)


def test_absurd_string_length(small, tmp_path):
    _, data = small
    # first key's length field follows the 24-byte header
    bad = data[:24] + struct.pack("<Q", 2**50) + data[32:]
    with pytest.raises(GGUFError, match="absurd string length"):
        load_bytes(tmp_path, bad)


def test_unknown_tensor_type_and_offset_past_end(small, tmp_path):
    path, data = small
    name = b"t.f16"
    at = data.index(name) + len(name)  # then n_dims u32, 2 dims u64, type u32, offset u64
    type_at = at + 4 + 16
    bad = data[:type_at] + struct.pack("<I", 77) + data[type_at + 4 :]
    with pytest.raises(GGUFError, match="unknown tensor type id 77"):
        load_bytes(tmp_path, bad)
    off_at = type_at + 4
    bad = data[:off_at] + struct.pack("<Q", 2**20 * 32) + data[off_at + 8 :]
    with pytest.raises(GGUFError, match="runs past the end"):
        load_bytes(tmp_path, bad)


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(GGUFError, match="cannot open"):
        GGUFFile(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="truncated"):
        load_bytes(tmp_path, b"")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_is_refused_at_once(tmp_path):
    """A FIFO named like a model (found by fuzzing the readers, session 19): open() waited for a writer
    forever before the reader could see it is no regular file. In a child, so a hang fails the test."""
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    code = "import sys\nfrom strata.engine import GGUFFile\nGGUFFile(sys.argv[1])\n"
    try:
        done = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("opening a named pipe still waits after 60 s")
    assert done.returncode == 1 and "not a regular file" in done.stderr, done.stderr[-500:]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_damage_never_crashes(small, tmp_path, data):
    _, raw = small
    buf = bytearray(raw)
    n_flips = data.draw(st.integers(1, 8))
    header_end = raw.index(b"t.f16") + 64  # damage the parsed part, where it matters
    for _ in range(n_flips):
        i = data.draw(st.integers(0, header_end))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    try:
        f = load_bytes(tmp_path, bytes(buf[:cut]))
    except GGUFError as e:
        assert str(e)
        return
    for t in f.tensors:
        assert t.offset + t.n_bytes <= f.file_size
