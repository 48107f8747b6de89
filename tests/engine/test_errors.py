"""Bad input to the engine: unsupported architectures and tensor types, bad arguments, out-of-range
tokens and contexts. Each raises a ValueError whose message names the problem.

Not here: malformed GGUF files (tests/gguf) or damaged snapshots (test_snapshot.py).
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from strata.engine import Engine, EngineError, GGUFFile, ModelError


@pytest.fixture(scope="module")
def path(tiny_model_factory):
    return tiny_model_factory(dtype="Q4_0", seed=1)


@pytest.fixture(scope="module")
def engine(path):
    return Engine(path, n_ctx=32, n_slots=2, slot_ctx=16, n_threads=2)


def test_unsupported_architecture_is_named(tiny_model_factory):
    p = tiny_model_factory(dtype="F32", arch="falcon")
    with pytest.raises(ModelError, match="unsupported architecture 'falcon'"):
        Engine(p, n_ctx=16)


def test_unsupported_tensor_type_is_named(tiny_model_factory, tmp_path):
    # IQ3_S blocks have Q3_K's size (256 elements, 110 bytes): relabel one tensor's type id
    from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

    path = tiny_model_factory(dtype="Q3_K", seed=1, **K_QUANT_SHAPE)
    f = GGUFFile(path)
    data = bytearray(path.read_bytes())
    name = b"blk.0.attn_q.weight"
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    type_at = at + 4 + 8 * n_dims
    assert struct.unpack_from("<I", data, type_at)[0] == f.tensor(name.decode()).type_id == 11
    struct.pack_into("<I", data, type_at, 21)
    bad = tmp_path / "iq3.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"'blk.0.attn_q.weight' has type IQ3_S.*supported: .* MXFP4\)"):
        Engine(bad, n_ctx=16)


def test_missing_tensor_is_named(path, tmp_path):
    data = bytearray(path.read_bytes())
    i = data.index(b"blk.1.ffn_up.weight")
    data[i : i + 6] = b"blk.9."
    bad = tmp_path / "renamed.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="missing tensor 'blk.1.ffn_up.weight'"):
        Engine(bad, n_ctx=16)


@pytest.mark.parametrize("kwargs, match", [
    ({"n_ctx": 0}, "n_ctx must be > 0"),
    ({"n_slots": -1}, "n_slots must be >= 0"),
    ({"n_groups": 0}, "n_groups must be > 0"),
    ({"n_threads": 0}, "n_threads must be > 0"),
    ({"kv_type": "q4_0"}, "kv_type must be one of"),
    ({"backend": "cuda"}, "backend 'cuda' is not available"),
    ({"n_ctx": 1.5}, "n_ctx must be an integer"),
])
def test_bad_constructor_arguments(path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        Engine(path, **kwargs)


def test_q8_0_kv_needs_head_size_multiple_of_32(path):
    with pytest.raises(EngineError, match="multiple of 32"):
        Engine(path, n_ctx=16, kv_type="q8_0")


def test_context_shapes(engine):
    assert engine.n_contexts == 3
    assert [engine.context_capacity(i) for i in range(3)] == [32, 16, 16]
    assert [engine.context_group(i) for i in range(3)] == [-1, 0, 0]
    with pytest.raises(EngineError, match="context id 3 out of range"):
        engine.context_len(3)


def test_bad_compute_calls(engine):
    engine.truncate(1, 0)
    with pytest.raises(EngineError, match="has no logits"):
        engine.logits(1)
    with pytest.raises(EngineError, match="token id 9999 at index 1 is outside the vocabulary"):
        engine.prefill(1, [1, 9999])
    with pytest.raises(ValueError, match="token ids must be in"):
        engine.prefill(1, [-1])
    with pytest.raises(EngineError, match="exceed its capacity 16"):
        engine.prefill(1, list(range(3, 20)))
    assert engine.context_len(1) == 0  # refused calls change nothing
    engine.prefill(1, [5, 6])
    engine.prefill(2, [5])
    with pytest.raises(EngineError, match="context 1 appears twice"):
        engine.decode([1, 1], [3, 4])
    with pytest.raises(EngineError, match="2 contexts but 1 tokens"):
        engine.decode([1, 2], [3])
    with pytest.raises(EngineError, match="cannot truncate to 5"):
        engine.truncate(1, 5)
    with pytest.raises(EngineError, match="cannot copy 3"):
        engine.copy(1, 2, 3)
    with pytest.raises(EngineError, match="both context 1"):
        engine.copy(1, 1, 1)
    with pytest.raises(ValueError, match="1-D"):
        engine.prefill(1, np.zeros((2, 2), dtype=np.int32))
    engine.prefill(2, list(range(3, 18)))
    with pytest.raises(EngineError, match="context 2 is full"):
        engine.decode([2], [3])


def test_copy_into_a_smaller_context_is_refused(engine):
    engine.truncate(0, 0)
    engine.prefill(0, list(range(3, 23)))
    with pytest.raises(EngineError, match="exceed context 1's capacity 16"):
        engine.copy(0, 1, 20)
    engine.copy(0, 1, 16)
    assert engine.context_tokens(1) == list(range(3, 19))


def test_a_vocabulary_larger_than_the_embedding_is_refused_at_load(tiny_model_factory, tmp_path):
    """tokenizer.ggml.tokens longer than token_embd.weight's rows (a crafted or mismatched file; llama.cpp
    refuses it by the embedding's shape): the model loaded, then every prompt holding one of the extra tokens
    (a BOS among them, at every request) failed with 'token id 530 ... is outside the vocabulary [0, 512)'
    (GGUF fuzzing). Fewer tokens than rows (padding rows) stay fine."""
    from strata.engine import check_model

    from tests.fixtures.gguf_bytes import ARRAY, INT32, STRING, UINT32, Val
    from tests.fixtures.gguf_rewrite import rewrite_metadata

    src = tiny_model_factory(dtype="F32", seed=2, n_vocab=512)
    md = GGUFFile(src).metadata
    extra = [f"<|extra{i}|>" for i in range(21)]
    longer = rewrite_metadata(src, tmp_path / "longer.gguf", {
        "tokenizer.ggml.tokens": Val(ARRAY, md["tokenizer.ggml.tokens"] + extra, STRING),
        "tokenizer.ggml.token_type": Val(ARRAY, md["tokenizer.ggml.token_type"] + [3] * 21, INT32),
        "tokenizer.ggml.bos_token_id": Val(UINT32, 530), "llama.vocab_size": None})
    says = "tokenizer.ggml.tokens has 533 tokens, more than the 512 rows of token_embd.weight"
    with pytest.raises(ModelError, match=says):
        Engine(longer, n_ctx=16)
    with pytest.raises(ValueError, match=says):
        check_model(longer)
    shorter = rewrite_metadata(src, tmp_path / "shorter.gguf", {
        "tokenizer.ggml.tokens": Val(ARRAY, md["tokenizer.ggml.tokens"][:500], STRING),
        "tokenizer.ggml.token_type": Val(ARRAY, md["tokenizer.ggml.token_type"][:500], INT32)})
    check_model(shorter)
    e = Engine(shorter, n_ctx=16)
    assert e.n_vocab == 512 and e.tokenizer.n_vocab == 500


def test_a_file_type_of_another_type_is_no_cpu_only_question(tiny_model_factory, tmp_path):
    """general.file_type an array or a string (a crafted file; the engine never reads it): `strata serve
    --backend cuda` asked cuda_lacks_of and raised TypeError: unhashable type: 'list' (a traceback), as did
    Engine(backend auto) on a CUDA machine through cpu_only. It is no CPU-only file type."""
    from strata.engine.gpu import cuda_lacks_of

    from strata.model_shape import cpu_only
    from tests.fixtures.gguf_bytes import ARRAY, INT32, STRING, Val
    from tests.fixtures.gguf_rewrite import rewrite_metadata

    src = tiny_model_factory(dtype="F32", seed=2)
    for i, value in enumerate([Val(ARRAY, [10, 11], INT32), Val(STRING, "Q2_K")]):
        path = rewrite_metadata(src, tmp_path / f"ft{i}.gguf", {"general.file_type": value})
        assert cuda_lacks_of(path) == ""
        assert cpu_only(GGUFFile(path).metadata) is False


@pytest.mark.parametrize(("present", "missing"), [
    (("attn_q.bias",), "attn_k.bias"),
    (("attn_q.bias", "attn_k.bias"), "attn_v.bias"),
    (("attn_k.bias", "attn_v.bias"), "attn_q.bias"),
    (("attn_q_norm.weight",), "attn_k_norm.weight"),
    (("attn_k_norm.weight",), "attn_q_norm.weight"),
])
def test_half_of_a_tensor_pair_is_refused_at_load_not_a_segfault(tiny_model_factory, tmp_path, present, missing):
    """Q / K / V biases and Q / K norms are optional where the architecture reads them when present (llama,
    glm4moe, seed_oss), but the forward pass adds them together: a crafted file with attn_q.bias and no
    attn_k.bias loaded and the first prompt read a null bias (SIGSEGV; GGUF fuzzing of a tiny glm4moe: 4 of
    1500 files with one bias dropped). In a child, where a crash is seen, not suffered."""
    import subprocess
    import sys

    from tests.fixtures.gguf_bytes import Tensor
    from tests.fixtures.gguf_rewrite import rewrite_metadata

    src = tiny_model_factory(dtype="F32", seed=2, n_embd=64, n_head=4, n_head_kv=2)   # Q 64, KV 32, head 16
    width = {"attn_q.bias": 64, "attn_k.bias": 32, "attn_v.bias": 32, "attn_q_norm.weight": 16,
             "attn_k_norm.weight": 16}
    added = [Tensor(f"blk.{il}.{name}", (width[name],), 0, np.ones(width[name], np.float32).tobytes())
             for il in (0, 1) for name in present]
    path = rewrite_metadata(src, tmp_path / "half.gguf", {}, add_tensors=added)
    code = ("import sys\nfrom strata.engine import Engine\n"
            "try:\n    e = Engine(sys.argv[1], n_ctx=16, n_threads=1)\n    e.generate([1, 2, 3], 2)\n"
            "except ValueError as x:\n    print('refused:', x)\n")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"status {done.returncode}: {done.stderr[-500:]}"
    assert f"blk.0.{present[0]} without blk.0.{missing}" in done.stdout, done.stdout


def _checked_by_numpy(tokens) -> np.ndarray:
    """Token ids as the engine checked every list before short ones were checked in Python."""
    a = np.asarray(tokens)
    if a.ndim != 1:
        raise ValueError(f"tokens must be a 1-D sequence of ints, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"tokens must be ints, got {a.dtype}")
    if a.size and (int(a.min()) < 0 or int(a.max()) >= 2**31):
        raise ValueError(f"token ids must be in [0, 2**31), got {int(a.min())}..{int(a.max())}")
    return a.astype(np.int32, copy=False)


@pytest.mark.parametrize("tokens", [[5], [0, 2**31 - 1], list(range(64)), list(range(65)), [], [True], [1, False],
                                    [-1], [3, 2**31], [1.0], [np.int64(3)], [[1]], (1, 2), np.array([4, 5]),
                                    [2**70], ["7"]])
def test_short_token_lists_are_checked_as_numpy_checks_them(tokens):
    """A short list of ints (a decode step's) is checked in Python: the same int32 ids, the same refusals."""
    from strata.engine import _tokens

    try:
        expected = _checked_by_numpy(tokens)
    except (ValueError, OverflowError) as e:
        with pytest.raises(type(e), match=re.escape(str(e))):
            _tokens(tokens)
        return
    got = _tokens(tokens)
    assert got.dtype == np.int32 and got.tolist() == expected.tolist()
