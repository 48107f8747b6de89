"""Fuzzing strata.engine.GGUFFile with hypothesis: random damage to a valid small file.

Not here: the placed defects and their messages (test_reader_damage.py). Each example takes the
every-value-type file (tests/fixtures/gguf_bytes.py), applies a few random mutations (byte flips,
extreme integers written over a field the Layout names, insertions, deletions, a truncation),
and opens it. The reader must either raise GGUFError with a message, or return a table whose
every tensor lies inside the file. A crash (segfault, abort) would end the test process.
"""

from __future__ import annotations

import contextlib
import itertools

import pytest

engine = pytest.importorskip("strata.engine")
if not hasattr(engine, "GGUFFile"):
    pytest.skip("strata.engine.GGUFFile does not exist yet", allow_module_level=True)

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.fixtures.gguf_bytes import all_value_types_kvs, build_gguf, patch, small_tensors  # noqa: E402

GGUFFile = engine.GGUFFile
GGUFError = engine.GGUFError

DATA, LAYOUT = build_gguf(all_value_types_kvs(), small_tensors())
FIELD_STARTS = sorted(
    [LAYOUT.n_tensors, LAYOUT.n_kv] + LAYOUT.kv_key + LAYOUT.kv_type + LAYOUT.kv_value + LAYOUT.t_name
    + LAYOUT.t_n_dims + LAYOUT.t_dims + LAYOUT.t_type + LAYOUT.t_offset
)
EXTREMES = [0, 1, 2, 7, 8, 9, 12, 13, 31, 32, 33, 255, 256, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40,
            2**62, 2**63 - 1, 2**63, 2**64 - 1, len(DATA), len(DATA) + 1]

byte_flip = st.tuples(st.just("flip"), st.integers(0, len(DATA) - 1), st.integers(0, 255))
field_smash = st.tuples(st.just("smash"), st.sampled_from(FIELD_STARTS), st.sampled_from(EXTREMES),
                        st.sampled_from(["<Q", "<I", "<B"]))
insert = st.tuples(st.just("insert"), st.integers(0, len(DATA)), st.binary(min_size=1, max_size=16))
delete = st.tuples(st.just("delete"), st.integers(0, len(DATA) - 1), st.integers(1, 16))
mutation = st.one_of(byte_flip, field_smash, insert, delete)


def mutate(data: bytes, ops) -> bytes:
    for op in ops:
        if op[0] == "flip":
            _, at, value = op
            if at < len(data):
                data = data[:at] + bytes([value]) + data[at + 1:]
        elif op[0] == "smash":
            _, at, value, fmt = op
            width = {"<Q": 8, "<I": 4, "<B": 1}[fmt]
            if at + width <= len(data):
                data = patch(data, at, fmt, value % (1 << (8 * width)))
        elif op[0] == "insert":
            _, at, raw = op
            data = data[:at] + raw + data[at:]
        else:
            _, at, n = op
            data = data[:at] + data[at + n:]
    return data


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


COUNTER = itertools.count()


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(mutation, min_size=1, max_size=6), cut=st.one_of(st.none(), st.integers(0, len(DATA))))
def test_random_damage_raises_or_reads_inside_the_file(folder, ops, cut):
    data = mutate(DATA, ops)
    if cut is not None:
        data = data[:cut]
    path = folder / f"fuzz-{next(COUNTER)}.gguf"
    path.write_bytes(data)
    try:
        f = GGUFFile(path)
    except GGUFError as e:
        event(str(e).split(": ", 1)[1].split(" ")[0] if ": " in str(e) else "bare message")
        assert str(e).startswith("GGUF ") and len(str(e)) > len("GGUF ") + len(str(path)) + 2
        return
    finally:
        with contextlib.suppress(OSError):   # Windows keeps a mapped file
            path.unlink()
    event("read")
    assert f.file_size == len(data)
    assert isinstance(f.metadata, dict) and all(isinstance(k, str) and k for k in f.metadata)
    for t in f.tensors:
        assert f.data_offset <= t.offset and t.offset + t.n_bytes <= f.file_size, t.name
        assert all(d >= 1 for d in t.shape), t.name
