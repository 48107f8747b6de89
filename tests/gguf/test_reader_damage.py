"""strata.engine.GGUFFile on damaged files: each defect raises GGUFError whose message names it.

Not here: random damage (test_reader_fuzz.py); the engine's own first malformed-file tests
(test_gguf_malformed.py, on a GGUFWriter file). These files come from the byte-exact builder
(tests/fixtures/gguf_bytes.py), whose Layout says where each field is, so every defect is placed
exactly: truncation at every byte, bad header, absurd counts and lengths, bad value and tensor types,
bad dimensions, offsets and alignment. "Never a crash" is shown by the test process surviving.
"""

from __future__ import annotations

import contextlib
import struct

import pytest

engine = pytest.importorskip("strata.engine")
if not hasattr(engine, "GGUFFile"):
    pytest.skip("strata.engine.GGUFFile does not exist yet", allow_module_level=True)

from tests.fixtures.gguf_bytes import (  # noqa: E402
    ARRAY,
    BOOL,
    INT32,
    STRING,
    UINT8,
    UINT32,
    UINT64,
    Tensor,
    Val,
    all_value_types_kvs,
    build_gguf,
    encode_string,
    patch,
    small_tensors,
)

GGUFFile = engine.GGUFFile
GGUFError = engine.GGUFError
TRUNCATION_WORDS = r"truncated|past the end|absurd"


@pytest.fixture(scope="module")
def built():
    """(bytes, Layout, kvs) of a file with every value type and five tensors (~4 KB)."""
    kvs = all_value_types_kvs()
    data, layout = build_gguf(kvs, small_tensors())
    return data, layout, kvs


def key_index(kvs, key: str) -> int:
    return [k for k, _ in kvs].index(key)


class Loader:
    """Writes each damaged variant to its own file (a file is never rewritten while mapped)."""

    def __init__(self, folder):
        self.folder = folder
        self.n = 0

    def __call__(self, data: bytes):
        self.n += 1
        path = self.folder / f"damaged-{self.n}.gguf"
        path.write_bytes(data)
        try:
            return GGUFFile(path)
        finally:
            with contextlib.suppress(OSError):   # Windows keeps a mapped file
                path.unlink()


@pytest.fixture
def load(tmp_path):
    return Loader(tmp_path)


def assert_refused(load, data: bytes, words: str):
    with pytest.raises(GGUFError, match=words) as info:
        load(data)
    assert str(info.value).startswith("GGUF ")   # names the file
    return str(info.value)


# ---- truncation ----

def test_truncated_at_every_byte(built, load):
    data, layout, _ = built
    assert load(data).tensors                       # the whole file is fine
    for cut in range(layout.size):
        assert_refused(load, data[:cut], TRUNCATION_WORDS)


def test_truncated_at_many_points_of_a_tiny_model(tiny_model_factory, load):
    data = tiny_model_factory().read_bytes()        # ~570 KB, ~12 KB of metadata (vocab, merges)
    good = load(data)
    header_end = good.data_offset
    cuts = sorted(set(range(0, header_end, 13)) | set(range(header_end, len(data), len(data) // 97)))
    assert len(cuts) > 900
    for cut in cuts:
        assert_refused(load, data[:cut], TRUNCATION_WORDS)
    assert_refused(load, data[:-1], "past the end")   # the last tensor lacks its last byte


# ---- header ----

@pytest.mark.parametrize("magic", [b"GGUG", b"\0\0\0\0", b"FUGG", b"ggml"])
def test_bad_magic(built, load, magic):
    assert_refused(load, magic + built[0][4:], "bad magic")


@pytest.mark.parametrize("version", [0, 1, 4, 0xFFFF, 0x03000000, 0xFFFFFFFF])
def test_unsupported_version(built, load, version):
    assert_refused(load, patch(built[0], 4, "<I", version), f"unsupported GGUF version {version}")


@pytest.mark.parametrize("field, value", [
    ("n_kv", 2**64 - 1), ("n_kv", 2**63), ("n_kv", 10**9), ("n_tensors", 2**64 - 1), ("n_tensors", 2**40)])
def test_absurd_counts(built, load, field, value):
    data, layout, _ = built
    kind = "metadata" if field == "n_kv" else "tensor"
    assert_refused(load, patch(data, getattr(layout, field), "<Q", value), f"absurd {kind} count")


def test_counts_that_fit_but_overrun(built, load):
    data, layout, kvs = built
    # one more key than written: the reader meets the tensor table where a key should be
    assert_refused(load, patch(data, layout.n_kv, "<Q", len(kvs) + 1), r"truncated|past the end|unknown|absurd|valid")


# ---- metadata ----

@pytest.mark.parametrize("length", [2**64 - 1, 2**63, 2**40])
def test_absurd_key_length(built, load, length):
    data, layout, _ = built
    assert_refused(load, patch(data, layout.kv_key[3], "<Q", length), "absurd string length|past the end|truncated")


def test_key_length_one_past_the_end(built, load):
    data, layout, _ = built
    at = layout.kv_key[0]
    assert_refused(load, patch(data, at, "<Q", len(data) - at - 8 + 1), r"truncated|past the end")


@pytest.mark.parametrize("type_id", [13, 14, 255, 2**31, 2**32 - 1])
def test_unknown_value_type(built, load, type_id):
    data, layout, kvs = built
    at = layout.kv_type[key_index(kvs, "test.u32")]
    words = f"unknown value type {type_id}" if type_id < 2**31 else "unknown value type"   # printed signed
    assert_refused(load, patch(data, at, "<I", type_id), words)


@pytest.mark.parametrize("type_id", [13, 99, 2**32 - 1])
def test_unknown_array_element_type(built, load, type_id):
    data, layout, kvs = built
    at = layout.kv_value[key_index(kvs, "test.array.int32")]
    words = f"unknown array element type {type_id}" if type_id < 2**31 else "unknown array element type"
    assert_refused(load, patch(data, at, "<I", type_id), words)


@pytest.mark.parametrize("key", ["test.array.uint8", "test.array.string", "test.array.nested", "test.array.float64"])
@pytest.mark.parametrize("count", [2**64 - 1, 2**61, 10**7])
def test_absurd_array_count(built, load, key, count):
    data, layout, kvs = built
    at = layout.kv_value[key_index(kvs, key)] + 4
    assert_refused(load, patch(data, at, "<Q", count), r"runs past the end|absurd|truncated")


def test_absurd_string_length_inside_an_array(built, load):
    data, layout, kvs = built
    at = layout.kv_value[key_index(kvs, "test.array.string")] + 12   # first element's length
    assert_refused(load, patch(data, at, "<Q", 2**62), r"absurd string length|past the end|truncated")


def test_bool_that_is_neither_0_nor_1(built, load):
    data, layout, kvs = built
    at = layout.kv_value[key_index(kvs, "test.bool_true")]
    assert_refused(load, patch(data, at, "<B", 2), "neither 0 nor 1")
    at = layout.kv_value[key_index(kvs, "test.array.bool")] + 12
    assert_refused(load, patch(data, at, "<B", 7), "neither 0 nor 1")


def test_invalid_utf8_in_key_and_value(built, load):
    data, layout, kvs = built
    assert_refused(load, patch(data, layout.kv_key[0] + 8, "<B", 0xFF), "not valid UTF-8")
    at = layout.kv_value[key_index(kvs, "test.string")] + 8
    assert_refused(load, patch(data, at, "<2B", *(0xC3, 0x28)), "not valid UTF-8")


def test_duplicate_and_empty_keys(load):
    dup = [("a", Val(UINT8, 1)), ("a", Val(UINT8, 2))]
    assert_refused(load, build_gguf(dup)[0], "duplicate metadata key 'a'")
    assert_refused(load, build_gguf([("", Val(UINT8, 1))])[0], "key #0 is empty")


def test_arrays_nested_absurdly_deep(load):
    depth = 100_000   # written by hand: an array of one array of one array ... of one INT32
    value = struct.pack("<IQ", ARRAY, 1) * depth + struct.pack("<IQi", INT32, 1, 5)
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + encode_string("deep") + struct.pack("<I", ARRAY) + value
    assert_refused(load, data, "nested deeper than")


@pytest.mark.parametrize("bad", [
    Val(UINT64, 32), Val(INT32, 32), Val(STRING, "32")])
def test_alignment_of_the_wrong_type(load, bad):
    data, _ = build_gguf([("general.alignment", bad)], small_tensors())
    assert_refused(load, data, "general.alignment must be a uint32")


@pytest.mark.parametrize("alignment", [0, 3, 48, 2**31 + 1])
def test_alignment_not_a_power_of_two(load, alignment):
    data, _ = build_gguf([("general.alignment", Val(UINT32, alignment))])
    assert_refused(load, data, f"general.alignment {alignment} is not a power of two")


# ---- tensor table ----

@pytest.mark.parametrize("n_dims", [0, 5, 2**32 - 1])
def test_bad_dimension_count(built, load, n_dims):
    data, layout, _ = built
    assert_refused(load, patch(data, layout.t_n_dims[0], "<I", n_dims), f"dimension count {n_dims}|truncated")


@pytest.mark.parametrize("dim", [0, 2**41, 2**64 - 1])
def test_absurd_dimension(built, load, dim):
    data, layout, _ = built
    assert_refused(load, patch(data, layout.t_dims[0], "<Q", dim), f"absurd dimension {dim}")


def test_element_count_overflow(load):
    data, _ = build_gguf([], [Tensor("big", (2**40, 2**40, 2**40), 0, bytes(32))])
    assert_refused(load, data, "overflows")


@pytest.mark.parametrize("type_id", [4, 5, 77, 1000, 2**31, 2**32 - 1])
def test_unknown_tensor_type(built, load, type_id):
    data, layout, _ = built
    # the exact id only below 2^31: the engine prints ids as signed (4294967295 reads as -1)
    words = f"unknown tensor type id {type_id}" if type_id < 2**31 else "unknown tensor type id"
    assert_refused(load, patch(data, layout.t_type[1], "<I", type_id), words)


def test_row_length_not_a_multiple_of_the_block(load):
    data, _ = build_gguf([], [Tensor("q", (33, 2), 8, bytes(34 * 4))])   # Q8_0 has blocks of 32
    assert_refused(load, data, "row length 33 is not a multiple")


@pytest.mark.parametrize("offset", [1, 16, 31])
def test_unaligned_offset(built, load, offset):
    data, layout, _ = built
    assert_refused(load, patch(data, layout.t_offset[0], "<Q", offset), f"data offset {offset} is not aligned")


@pytest.mark.parametrize("offset", [2**20, 2**40, 2**64 - 32])
def test_offset_past_the_end(built, load, offset):
    data, layout, _ = built
    assert_refused(load, patch(data, layout.t_offset[2], "<Q", offset), "past the end")


def test_duplicate_tensor_name(load):
    tensors = [Tensor("w", (32,), 0, bytes(128)), Tensor("w", (32,), 0, bytes(128))]
    assert_refused(load, build_gguf([], tensors)[0], "duplicate tensor name 'w'")


def test_tensor_name_bad_utf8_and_absurd_length(built, load):
    data, layout, _ = built
    assert_refused(load, patch(data, layout.t_name[0] + 8, "<B", 0x80), "not valid UTF-8")
    assert_refused(load, patch(data, layout.t_name[0], "<Q", 2**63), "absurd string length|past the end|truncated")


def test_not_a_file(tmp_path):
    with pytest.raises(GGUFError, match="cannot open|not a regular file"):
        GGUFFile(tmp_path)
    with pytest.raises(GGUFError, match="cannot open"):
        GGUFFile(tmp_path / "missing.gguf")


def test_helpers_place_damage_where_the_layout_says(built):
    """The builder's Layout points at the fields it names (else the tests above test nothing)."""
    data, layout, kvs = built
    assert data[:4] == b"GGUF" and struct.unpack_from("<Q", data, layout.n_kv)[0] == len(kvs)
    i = key_index(kvs, "test.bool_true")
    assert data[layout.kv_key[i]:layout.kv_type[i]] == encode_string("test.bool_true")
    assert struct.unpack_from("<I", data, layout.kv_type[i])[0] == BOOL
    assert struct.unpack_from("<I", data, layout.t_type[1])[0] == 1   # b.f16
    assert struct.unpack_from("<Q", data, layout.t_dims[0])[0] == 8
