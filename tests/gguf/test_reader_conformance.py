"""strata.engine.GGUFFile agrees with the gguf package's GGUFReader, and with what was written.

Not here: damaged files (test_reader_damage.py, test_reader_fuzz.py).

Conventions compared:
- shapes in GGUF's own order, ne[0] first (the row length first), as gguf.ReaderTensor.shape and
  the file store them; e.g. token_embd.weight of the default model is [576, 49152];
- offsets are absolute byte positions in the file (gguf's ReaderTensor.data_offset);
- metadata values as plain Python: ints, floats (FLOAT32 widened exactly from float32), bools,
  str, lists (nested arrays as nested lists; gguf's reader flattens those, so they are compared
  flattened against it and exactly against the written value).
"""

from __future__ import annotations

import pytest

gguf = pytest.importorskip("gguf")
engine = pytest.importorskip("strata.engine")
if not hasattr(engine, "GGUFFile"):
    pytest.skip("strata.engine.GGUFFile does not exist yet", allow_module_level=True)

from tests.fixtures.gguf_bytes import (  # noqa: E402
    ARRAY,
    UINT32,
    Tensor,
    Val,
    all_value_types_kvs,
    build_gguf,
    expected_python,
    small_tensors,
)
from tests.fixtures.tiny_gguf import ALL_TYPES, CPU_QUANT_TYPES, K_QUANT_SHAPE, K_QUANT_TYPES, MXFP4_TYPES  # noqa: E402

GGUFFile = engine.GGUFFile
HEADER_FIELDS = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}


def flatten(value):
    if isinstance(value, list):
        return [x for item in value for x in flatten(item)]
    return [value]


def as_plain(value):
    """Numpy arrays or tuples (should a reader return them) as lists, recursively."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [as_plain(v) for v in value]
    return value


def assert_agrees_with_gguf_package(path, *, check_values: bool = True) -> GGUFFile:
    ours = GGUFFile(path)
    ref = gguf.GGUFReader(str(path))
    ref_keys = [k for k in ref.fields if k not in HEADER_FIELDS]
    assert list(ours.metadata) == ref_keys                       # same keys, in file order
    assert ours.version == ref.fields["GGUF.version"].contents()
    assert ours.data_offset == ref.data_offset and ours.alignment == ref.alignment
    assert ours.file_size == path.stat().st_size
    types = ours.metadata_types()
    for key in ref_keys:
        field = ref.fields[key]
        want_types = [int(t) for t in field.types]
        got_types = list(types[key])
        if want_types[0] == ARRAY and len(want_types) == 1:      # gguf leaves an empty array's type out
            assert got_types[0] == ARRAY, key
        else:
            assert got_types == want_types[: len(got_types)], key
        if check_values:
            got = as_plain(ours.metadata[key])
            want = field.contents()
            if isinstance(got, list):
                got = flatten(got)
            assert got == want, key
            assert type(got) is type(want), key
    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    for ot, rt in zip(ours.tensors, ref.tensors, strict=True):
        assert as_plain(ot.shape) == rt.shape.tolist(), ot.name       # ne order
        assert ot.type == rt.tensor_type.name and ot.type_id == int(rt.tensor_type), ot.name
        assert ot.offset == rt.data_offset, ot.name                   # absolute
        assert ot.n_bytes == rt.n_bytes, ot.name
    return ours


@pytest.fixture(scope="module")
def all_types_file(tmp_path_factory):
    kvs = all_value_types_kvs()
    data, _ = build_gguf(kvs, small_tensors())
    path = tmp_path_factory.mktemp("conformance") / "all_types.gguf"
    path.write_bytes(data)
    return path, kvs


def test_every_value_type_agrees_with_gguf_package(all_types_file):
    path, _ = all_types_file
    assert_agrees_with_gguf_package(path)


def test_every_value_is_exactly_what_was_written(all_types_file):
    path, kvs = all_types_file
    f = GGUFFile(path)
    types = f.metadata_types()
    for key, val in kvs:
        got = as_plain(f.metadata[key])
        assert got == expected_python(val), key
        assert type(got) is type(expected_python(val)), key
        assert tuple(types[key]) == ((val.type,) if val.type != ARRAY else (ARRAY, val.elem)), key


def test_tensor_table_is_what_was_written(all_types_file):
    path, _ = all_types_file
    f = GGUFFile(path)
    raw = path.read_bytes()
    written = small_tensors()
    assert [t.name for t in f.tensors] == [t.name for t in written]
    for got, want in zip(f.tensors, written, strict=True):
        assert as_plain(got.shape) == list(want.dims) and got.type_id == want.type_id
        assert got.offset % 32 == 0 and got.offset >= f.data_offset
        assert raw[got.offset:got.offset + got.n_bytes] == want.data


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("alignment", [32, 64, 256])
def test_versions_and_custom_alignment(tmp_path, version, alignment):
    kvs = [("general.architecture", Val(8, "llama"))]
    if alignment != 32:
        kvs.append(("general.alignment", Val(UINT32, alignment)))
    tensors = small_tensors() + [Tensor("z.late", (8,), 0, bytes(32))]
    data, layout = build_gguf(kvs, tensors, version=version, alignment=alignment)
    path = tmp_path / "aligned.gguf"
    path.write_bytes(data)
    f = assert_agrees_with_gguf_package(path)
    assert f.version == version and f.alignment == alignment
    assert f.data_offset == layout.data_offset and f.data_offset % alignment == 0
    assert all(t.offset % alignment == 0 for t in f.tensors)


def test_a_file_without_tensors(tmp_path):
    data, _ = build_gguf([("general.architecture", Val(8, "llama")), ("x", Val(ARRAY, [], ARRAY))])
    path = tmp_path / "no_tensors.gguf"
    path.write_bytes(data)
    f = assert_agrees_with_gguf_package(path)
    assert f.tensors == [] and f.metadata["x"] == []


@pytest.mark.parametrize("dtype", ALL_TYPES + MXFP4_TYPES + CPU_QUANT_TYPES)
def test_tiny_models_agree_with_gguf_package(tiny_model_factory, dtype):
    shape = K_QUANT_SHAPE if dtype in K_QUANT_TYPES or dtype in ("Q2_K", "Q3_K", "IQ4_XS") else {}
    f = assert_agrees_with_gguf_package(tiny_model_factory(dtype=dtype, **shape))
    assert f.metadata["tokenizer.ggml.tokens"][:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def test_default_model_agrees_with_gguf_package(default_model_path):
    f = assert_agrees_with_gguf_package(default_model_path)
    md = f.metadata
    assert md["general.architecture"] == "llama" and md["llama.block_count"] == 30
    assert len(md["tokenizer.ggml.tokens"]) == 49152 and len(md["tokenizer.ggml.merges"]) == 48900
    assert len(f.tensors) == 272
    embd = next(t for t in f.tensors if t.name == "token_embd.weight")
    assert as_plain(embd.shape) == [576, 49152] and embd.type == "Q8_0"
    assert {t.type for t in f.tensors} == {"Q4_1", "Q8_0", "F32"}
