"""The tiny-model fixtures (make_tiny_gguf, the BPE vocabulary, K-quant blocks) and the reference on them.

Not here: the default model (test_reference_default_model.py) or the engine.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from tests.fixtures.bpe_vocab import SPECIAL_TOKENS, bpe_encode, build_vocab, bytes_to_unicode, decode_tokens
from tests.fixtures.kquant_blocks import pack_q4_k_scales, random_kquant
from tests.fixtures.reference import KVState, ReferenceModel, load_reference_model, reference_logits
from tests.fixtures.tiny_gguf import ALL_TYPES, K_QUANT_SHAPE, K_QUANT_TYPES, make_tiny_gguf


def shape_for(dtype: str) -> dict:
    return dict(K_QUANT_SHAPE) if dtype in K_QUANT_TYPES else {}


# ---- vocabulary ----

def test_vocab_layout_and_merges():
    v = build_vocab(512)
    assert v.n_vocab == 512 and v.tokens[:3] == SPECIAL_TOKENS
    assert v.token_types[:3] == (3, 3, 3) and set(v.token_types[3:]) == {1}
    assert set(bytes_to_unicode().values()) <= set(v.tokens)
    assert len(v.merges) == 512 - 259
    have = set(v.tokens)
    for m in v.merges:
        left, right = m.split(" ")
        assert left in have and right in have and left + right in have
    assert build_vocab.__wrapped__(512) == v   # deterministic


def test_vocab_too_small_is_refused():
    with pytest.raises(ValueError, match="n_vocab=100 is too small"):
        build_vocab(100)


def test_vocab_loads_in_the_tokenizers_library():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    v = build_vocab(512)
    bpe = models.BPE({t: i for i, t in enumerate(v.tokens)}, [tuple(m.split(" ")) for m in v.merges])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = "The model reads the whole conversation once. héllo 🙂"
    ids = tok.encode(text).ids
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode()) // 2    # the merges do compress ordinary text
    assert bpe_encode(v.tokens, v.merges, "The model reads the whole conversation") == \
        tok.encode("The model reads the whole conversation").ids
    assert decode_tokens(v.tokens, v.token_types, bpe_encode(v.tokens, v.merges, text)) == text


# ---- K-quant blocks ----

def test_q4_k_scale_packing_round_trips_through_gguf():
    rng = np.random.default_rng(1)
    sc, m = rng.integers(0, 64, size=(5, 8)), rng.integers(0, 64, size=(5, 8))
    got_sc, got_m = gguf.quants.Q4_K.get_scale_min(pack_q4_k_scales(sc, m))
    assert np.array_equal(got_sc, sc) and np.array_equal(got_m, m)


@pytest.mark.parametrize("qtype", K_QUANT_TYPES)
def test_random_kquant_blocks_have_the_asked_scale(qtype):
    raw = random_kquant(np.random.default_rng(0), qtype, 64, 512, std=0.05)
    values = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype])
    assert values.shape == (64, 512) and np.isfinite(values).all()
    assert 0.035 < values.std() < 0.07 and abs(values.mean()) < 0.01
    assert len(np.unique(values)) > 1000


def test_random_kquant_refuses_bad_rows():
    with pytest.raises(ValueError, match="row length 64 is not a multiple of 256"):
        random_kquant(np.random.default_rng(0), "Q4_K", 4, 64, std=0.1)


# ---- make_tiny_gguf ----

@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_tiny_model_has_the_asked_types_and_llama_layout(tiny_model_factory, dtype):
    path = tiny_model_factory(dtype=dtype, **shape_for(dtype))
    r = gguf.GGUFReader(path)
    md = {k: f.contents() for k, f in r.fields.items()}
    assert md["general.architecture"] == "llama" and md["tokenizer.ggml.model"] == "gpt2"
    assert md["tokenizer.ggml.pre"] == "smollm" and "<|im_start|>" in md["tokenizer.chat_template"]
    assert md["tokenizer.ggml.bos_token_id"] == 1 and md["tokenizer.ggml.eos_token_id"] == 2
    assert len(md["tokenizer.ggml.tokens"]) == md["llama.vocab_size"] == 512
    n_embd = md["llama.embedding_length"]
    tensors = {t.name: t for t in r.tensors}
    assert len(tensors) == 3 + 9 * md["llama.block_count"]
    for name, t in tensors.items():
        want = "F32" if name.endswith("norm.weight") else dtype
        assert t.tensor_type.name == want, name
    assert tensors["token_embd.weight"].shape.tolist() == [n_embd, 512]        # GGUF order: ne0 first
    assert tensors["blk.0.attn_k.weight"].shape.tolist() == [n_embd, n_embd // 2]   # n_head_kv = n_head / 2


def test_tiny_model_is_deterministic(tmp_path):
    a = make_tiny_gguf(tmp_path / "a.gguf", dtype="Q4_1", seed=3).read_bytes()
    b = make_tiny_gguf(tmp_path / "b.gguf", dtype="Q4_1", seed=3).read_bytes()
    c = make_tiny_gguf(tmp_path / "c.gguf", dtype="Q4_1", seed=4).read_bytes()
    assert a == b and a != c


def test_tied_embeddings_and_type_overrides(tiny_model_factory):
    tied = gguf.GGUFReader(tiny_model_factory(tied_embeddings=True))
    assert "output.weight" not in {t.name for t in tied.tensors}
    mixed = gguf.GGUFReader(tiny_model_factory(dtype="Q4_K", type_overrides={"output": "Q6_K", "ffn_down": "Q8_0"},
                                               **K_QUANT_SHAPE))
    types = {t.name: t.tensor_type.name for t in mixed.tensors}
    assert types["output.weight"] == "Q6_K" and types["blk.1.ffn_down.weight"] == "Q8_0"
    assert types["blk.1.ffn_up.weight"] == "Q4_K"


@pytest.mark.parametrize(
    "params, message",
    [
        ({"dtype": "IQ2_XS"}, "dtype='IQ2_XS' is not a type"),
        ({"dtype": "Q4_K"}, "row length 64 is not a multiple of 256"),
        ({"n_embd": 66}, "n_embd=66 is not a multiple of n_head=4"),
        ({"n_embd": 60, "n_head": 20, "n_head_kv": 4}, "n_embd/n_head=3 must be even"),
        ({"n_head_kv": 3}, "n_head=4 is not a multiple of n_head_kv=3"),
        ({"n_layer": 0}, "n_layer must be a positive integer"),
        ({"n_vocab": 200}, "n_vocab=200 is too small"),
        ({"type_overrides": {"attn_x": "F16"}}, "unknown role 'attn_x'"),
        ({"tied_embeddings": True, "type_overrides": {"output": "F16"}}, "tied_embeddings=True"),
    ],
)
def test_bad_parameters_are_refused_by_name(tmp_path, params, message):
    with pytest.raises(ValueError, match=message):
        make_tiny_gguf(tmp_path / "bad.gguf", **params)


# ---- the reference on tiny models ----

TOKENS = [1, 300, 45, 46, 47, 2, 280, 3, 400, 511, 0, 77]


@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_reference_logits_are_sane_in_every_type(tiny_model_factory, dtype):
    logits = reference_logits(tiny_model_factory(dtype=dtype, **shape_for(dtype)), TOKENS)
    assert logits.shape == (len(TOKENS), 512) and logits.dtype == np.float64
    assert np.isfinite(logits).all() and np.abs(logits).max() < 50
    assert (logits.std(axis=-1) > 0.5).all()                       # not all equal
    assert len({int(i) for i in logits.argmax(axis=-1)}) > 3       # the position changes the choice


def test_reference_is_causal_and_last_only_matches(tiny_model_factory):
    model = load_reference_model(tiny_model_factory())
    full = model.logits(TOKENS)
    for n in (1, 5, len(TOKENS)):
        np.testing.assert_allclose(model.logits(TOKENS[:n]), full[:n], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.logits(TOKENS, last_only=True)[0], full[-1], rtol=1e-12, atol=1e-12)


def test_incremental_state_gives_the_same_logits(tiny_model_factory):
    model = load_reference_model(tiny_model_factory(n_head_kv=1))
    full = model.logits(TOKENS)
    state = KVState()
    pieces = [model.logits(TOKENS[a:b], state=state) for a, b in ((0, 5), (5, 6), (6, 12))]
    np.testing.assert_allclose(np.concatenate(pieces), full, rtol=1e-10, atol=1e-10)
    assert state.n_past == len(TOKENS) and state.k[0].shape == (len(TOKENS), 1, 16)
    greedy = model.greedy(TOKENS[:4], 6, stop_at_eos=False)
    seq = TOKENS[:4]
    for want in greedy:                      # each greedy step is the argmax of a full recompute
        assert int(model.logits(seq)[-1].argmax()) == want
        seq = seq + [want]


@pytest.mark.parametrize("dtype, max_error, min_corr", [
    ("F16", 0.005, 0.99999), ("BF16", 0.02, 0.9999), ("Q8_0", 0.05, 0.999), ("Q5_1", 0.3, 0.98), ("Q4_0", 0.5, 0.9)])
def test_quantized_models_approximate_their_f32_twin(tiny_model_factory, dtype, max_error, min_corr):
    """Same seed -> the same float weights before quantizing, so the logits stay close (measured:
    largest error / largest logit 0.0008 F16, 0.006 BF16, 0.017 Q8_0, 0.14 Q5_1, 0.28 Q4_0)."""
    exact = reference_logits(tiny_model_factory(dtype="F32"), TOKENS)
    approx = reference_logits(tiny_model_factory(dtype=dtype), TOKENS)
    assert np.abs(approx - exact).max() < max_error * np.abs(exact).max()
    assert np.corrcoef(approx.ravel(), exact.ravel())[0, 1] > min_corr


def test_rope_matches_the_hugging_face_form_before_the_converters_permutation(tiny_model_factory):
    """GGUF NORM RoPE on adjacent pairs of the permuted Q/K == HF rotate_half on the original rows."""
    model = ReferenceModel(tiny_model_factory())
    c = model.config
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, c.n_embd))
    wq = model.weights["blk.0.attn_q.weight"]                                  # (n_embd, n_embd), permuted
    d = c.head_dim
    # undo llama.cpp convert_hf_to_gguf's permute(w, n_head): reshape(n_head, 2, d/2, ...).swapaxes(1, 2)
    wq_hf = wq.reshape(c.n_head, d // 2, 2, c.n_embd).swapaxes(1, 2).reshape(c.n_embd, c.n_embd)
    pos = np.arange(6)
    ours = model._rope((x @ wq.T).reshape(6, c.n_head, d), pos).reshape(6, c.n_embd)
    q = (x @ wq_hf.T).reshape(6, c.n_head, d)
    inv = c.rope_freq_base ** (-np.arange(0, d, 2) / d)
    ang = np.concatenate([pos[:, None] * inv] * 2, axis=-1)[:, None, :]        # (6, 1, d)
    rotated = np.concatenate([-q[..., d // 2:], q[..., : d // 2]], axis=-1)
    hf = q * np.cos(ang) + rotated * np.sin(ang)                                # (6, n_head, d) in HF order
    hf_in_gguf_order = hf.reshape(6, c.n_head, 2, d // 2).swapaxes(2, 3).reshape(6, c.n_embd)
    np.testing.assert_allclose(ours, hf_in_gguf_order, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n_head_kv", [1, 4])
def test_mqa_and_mha_run(tiny_model_factory, n_head_kv):
    logits = reference_logits(tiny_model_factory(n_head_kv=n_head_kv), TOKENS)
    assert np.isfinite(logits).all()


def test_tied_output_uses_the_embedding_matrix(tiny_model_factory):
    model = ReferenceModel(tiny_model_factory(tied_embeddings=True))
    assert "output.weight" not in model.weights
    hidden_logits = model.logits(TOKENS)
    model.weights["output.weight"] = model.weights["token_embd.weight"] * 2.0
    np.testing.assert_allclose(model.logits(TOKENS), 2.0 * hidden_logits, rtol=1e-10)


def test_reference_refuses_bad_input(tiny_model_factory):
    path = tiny_model_factory()
    with pytest.raises(ValueError, match="token id 512 is outside the vocabulary"):
        reference_logits(path, [1, 512])
    with pytest.raises(ValueError, match="tokens is empty"):
        reference_logits(path, [])
    with pytest.raises(ValueError, match="only, not 'mamba'"):
        ReferenceModel(tiny_model_factory(arch="mamba"))
