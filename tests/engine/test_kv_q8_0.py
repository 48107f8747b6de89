"""The q8_0 KV cache (`kv_type="q8_0"`: K in tiles scored with exact int32 dots against the query
quantized to q8_0, V rows; engine_native/src/attention.h) on tiny generated models and the default
model.

- Logits against a NumPy reference of the same arithmetic: the float reference
  (tests/fixtures/reference.py) with K and V rounded to llama.cpp's q8_0 blocks (fp16 d = amax / 127)
  and each query head to q8_0 blocks (float d), then attention in float64. The engine computes the
  same products exactly (int32 dots), so only float32 rounding separates them, and the odd element
  that float32 rounds to the other side of a quantization step: measured 4e-7 to 6e-5 of the logit
  scale (bound 5e-4); the plain reference is 1e-2 away (what q8_0 costs).
- The KV bytes (kv_read: the snapshot and cache-file format) are llama.cpp's q8_0 rows whatever the
  engine's tiled layout: decoded, they are the reference's K and V within half a quantization step.
- The bitwise rule: decode one token at a time == chunked prefill == a batch with other contexts at
  any thread count; a snapshot restored into a fresh engine (rows -> tiles) continues with the same
  bytes.
- The default model: greedy tokens of a chat prompt with q8_0 equal f16's.
- Head sizes the q8_0 kernels do not take (over 256) are refused by name.

Not here: the kernel on the AVX2 / scalar builds (tests/native/test_attention_q8_builds.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine, EngineError

from tests.fixtures.reference import KVState, ReferenceModel

# (n_embd, n_head, n_head_kv): head sizes 32 / 64 / 128, 1-3 query heads per kv head
SHAPES = {"hd32-rep2": (128, 4, 2), "hd64-rep3": (192, 3, 1), "hd128-rep2": (256, 2, 1)}
N_TOKENS = 53   # 4 tiles of 16 positions, the last one partial


def _tokens(seed: int, n: int = N_TOKENS) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 500, size=n)]


def q8_0_blocks(x: np.ndarray, fp16_scale: bool) -> tuple[np.ndarray, np.ndarray]:
    """(..., d) -> quants (..., d / 32, 32) and scales (..., d / 32, 1), float32 arithmetic as the engine's."""
    b = x.reshape(*x.shape[:-1], -1, 32).astype(np.float32)
    d = np.abs(b).max(axis=-1, keepdims=True) / np.float32(127)
    if fp16_scale:
        d = d.astype(np.float16).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    return np.clip(np.rint(b * inv), -127, 127), d


def q8_0_values(x: np.ndarray, fp16_scale: bool) -> np.ndarray:
    q, d = q8_0_blocks(x, fp16_scale)
    return (q.astype(np.float64) * d).reshape(x.shape)


class Q8ReferenceModel(ReferenceModel):
    """The float reference with the q8_0 cache's roundings: K, V to q8_0 rows, queries to q8_0 blocks."""

    def _attention(self, q, k, v, n_past, window=0, sinks=None):
        return super()._attention(q8_0_values(q, False), q8_0_values(k, True), q8_0_values(v, True), n_past,
                                  window, sinks)


def logits_one_by_one(engine: Engine, tokens: list[int]) -> np.ndarray:
    return np.stack([engine.decode([0], [t])[0] for t in tokens])


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    return float((np.abs(got - ref).max(axis=1) / np.abs(ref).max(axis=1)).max())


@pytest.fixture(scope="module", params=list(SHAPES))
def model(request, tiny_model_factory):
    n_embd, n_head, n_head_kv = SHAPES[request.param]
    return tiny_model_factory(dtype="F32", seed=11, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=128)


def test_logits_equal_a_reference_of_the_same_arithmetic(model):
    tokens = _tokens(2)
    got = logits_one_by_one(Engine(model, n_ctx=64, n_threads=2, kv_type="q8_0"), tokens)
    assert relative_error(got, Q8ReferenceModel(model).logits(tokens)) < 5e-4
    # the roundings matter: the plain float reference is far (so the bound above tests them)
    assert relative_error(got, ReferenceModel(model).logits(tokens)) > 1e-3


def test_kv_bytes_are_llama_cpp_q8_0_rows(model):
    tokens = _tokens(3)
    engine = Engine(model, n_ctx=64, n_threads=1, kv_type="q8_0")
    engine.prefill(0, tokens, chunk=7)
    ref = Q8ReferenceModel(model)   # later layers' K and V depend on the earlier layers' q8_0 attention
    state = KVState()
    ref.logits(tokens, state=state)
    c = ref.config
    n, kv_dim = len(tokens), c.n_head_kv * c.head_dim
    row = kv_dim // 32 * 34
    assert engine.bytes_per_token == c.n_layer * 2 * row
    raw = np.frombuffer(engine.kv_read(0, 0, n), dtype=np.uint8).reshape(c.n_layer, 2, n, kv_dim // 32, 34)
    scales = raw[..., :2].copy().view(np.float16).astype(np.float64)        # (..., blocks, 1)
    quants = raw[..., 2:].view(np.int8).astype(np.float64)                   # (..., blocks, 32)
    for il in range(c.n_layer):
        for j, want in enumerate((state.k[il], state.v[il])):
            what = f"layer {il} {'KV'[j]}"
            want_q, want_d = q8_0_blocks(want.reshape(n, kv_dim), True)
            d = scales[il, j]
            err = np.abs(quants[il, j] * d - want.reshape(n, kv_dim // 32, 32))
            # a wrong layout or block format is off by the values themselves (up to 127 d)
            assert np.all(err <= 2 * d + 1e-6), f"{what}: values off by {err.max():.3g}"
            if il == 0:   # before any attention: the same roundings up to the float32 / float64 difference
                assert np.allclose(d, want_d, rtol=2e-3, atol=0), f"{what}: block scales"
                assert np.all(err <= 0.5 * d * (1 + 1e-3) + 1e-6), f"{what}: values off by {err.max():.3g}"
                assert np.mean(quants[il, j] == want_q) > 0.999, what


def test_decode_prefill_chunks_and_batches_give_the_same_bytes(model):
    tokens = _tokens(4)
    solo = Engine(model, n_ctx=64, n_threads=1, kv_type="q8_0")
    want_logits = logits_one_by_one(solo, tokens)[-1]
    want_kv = solo.kv_read(0, 0, len(tokens))
    for threads in (1, 2):
        e = Engine(model, n_ctx=64, n_slots=3, slot_ctx=64, n_threads=threads, kv_type="q8_0")
        for chunk in (len(tokens), 16, 5):
            e.truncate(0, 0)
            e.prefill(0, tokens, chunk=chunk)
            assert e.kv_read(0, 0, len(tokens)) == want_kv, f"chunk {chunk}, {threads} threads"
            assert np.array_equal(e.logits(0), want_logits)
        # the same tokens decoded in a batch with two other contexts of other lengths
        e.prefill(1, _tokens(5, 30))
        e.prefill(2, _tokens(6, 9))
        e.prefill(3, tokens[:40])
        others = _tokens(7, 13)
        for i, t in enumerate(tokens[40:]):
            out = e.decode([1, 3, 2], [others[i], t, others[-1 - i]])
        assert e.kv_read(3, 0, len(tokens)) == want_kv, f"batched, {threads} threads"
        assert np.array_equal(out[1], want_logits)


def test_a_restored_snapshot_continues_bitwise(model):
    tokens = _tokens(8)
    e = Engine(model, n_ctx=64, n_threads=2, kv_type="q8_0")
    e.prefill(0, tokens[:37])
    image = e.snapshot(0)
    fresh = Engine(model, n_ctx=64, n_threads=2, kv_type="q8_0")
    assert fresh.restore(0, image) == 37
    assert fresh.kv_read(0, 0, 37) == e.kv_read(0, 0, 37)
    for t in tokens[37:]:   # reads the tiles kv_write built from the image's rows
        assert np.array_equal(fresh.decode([0], [t])[0], e.decode([0], [t])[0])
    assert fresh.kv_read(0, 0, len(tokens)) == e.kv_read(0, 0, len(tokens))
    assert fresh.snapshot(0) == e.snapshot(0)


def test_default_model_greedy_tokens_equal_f16(default_model_path):
    """Both KV types read f16's greedy answer (the same tokens fed to each): q8_0's top token is f16's at
    every position but near ties (f16's two best within 0.25 logits; one such tie, 0.03 apart, flips on
    one machine and not another, hence no free-running comparison). Most positions are no tie."""
    prompt = ("<|im_start|>user\nWrite a Python function that returns the n-th Fibonacci number, with a "
              "docstring and a short explanation.<|im_end|>\n<|im_start|>assistant\n")
    f16 = Engine(default_model_path, n_ctx=512, n_threads=2, kv_type="f16")
    q8 = Engine(default_model_path, n_ctx=512, n_threads=2, kv_type="q8_0")
    toks = f16.tokenize(prompt)
    for e in (f16, q8):
        e.prefill(0, toks)
    want, got = f16.logits(0), q8.logits(0)
    ties = 0
    for i in range(48):
        best, second = np.sort(want)[-2:][::-1]
        if best - second < 0.25:
            ties += 1
        else:
            assert int(np.argmax(got)) == int(np.argmax(want)), (i, best - second)
        token = int(np.argmax(want))
        want, got = f16.decode([0], [token])[0], q8.decode([0], [token])[0]
    assert ties <= 6


@pytest.mark.parametrize("shape", [(192, 3, 1), (256, 2, 1), (192, 6, 3)], ids=["hd64-kv1", "hd128-kv1", "hd32-kv3"])
def test_a_long_lone_row_in_parts_is_the_same(shape, tiny_model_factory):
    # 2 threads and one row of > 1,024 positions whose kv heads do not balance them: forward.cpp runs its
    # attention in parts (attention_split_ok); 1 thread never does
    n_embd, n_head, n_head_kv = shape
    path = tiny_model_factory(n_layer=2, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=128, seed=5,
                              ctx_len=2048)
    tokens = _tokens(9, 1103)
    runs = []
    for threads in (1, 2):
        e = Engine(path, n_ctx=1200, n_threads=threads, kv_type="q8_0")
        e.prefill(0, tokens[:1100])
        runs.append(([e.decode([0], [t])[0] for t in tokens[1100:]], e.kv_read(0, 0, len(tokens))))
    for a, b in zip(runs[0][0], runs[1][0], strict=True):
        assert np.array_equal(a, b)
    assert runs[0][1] == runs[1][1]


def test_a_head_size_over_256_is_refused_by_name(tiny_model_factory):
    path = tiny_model_factory(n_embd=288, n_head=1, n_head_kv=1, n_ff=64)   # head size 288 = 9 blocks
    with pytest.raises(EngineError, match="q8_0 KV supports head sizes up to 256, this model has 288"):
        Engine(path, n_ctx=16, kv_type="q8_0")
    Engine(path, n_ctx=16, kv_type="f16")   # f16 takes it
