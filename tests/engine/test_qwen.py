"""The qwen2 (Q/K/V biases), qwen3 (per-head Q/K RMS norms) and qwen3moe (qwen3 with a mixture of
experts for the FFN) architectures against a small NumPy forward pass written here: all use RoPE in
the NEOX style (rotation of x[i] with x[i + d/2]).

Not here: llama (the fixtures' reference, test_logits_reference.py). The models are random F32
weights written with the gguf package; the engine runs them with an f32 KV cache, so float32
rounding alone separates it from the float64 reference (tolerance 2e-5 of the logit scale).
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from strata.engine import Engine

N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB = 2, 64, 4, 2, 96, 300
N_EXPERT, N_EXPERT_USED, N_FF_EXP = 6, 3, 32   # qwen3moe: its expert width differs from feed_forward_length
HEAD_DIM = N_EMBD // N_HEAD
BASE, EPS = 10000.0, 1e-6
TOKENS = [1, 7, 200, 42, 5, 299, 0, 13, 13, 77]


def make_model(path, arch: str, seed: int = 0, *, expert_ff_key: bool = True) -> dict:
    rng = np.random.default_rng(seed)

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def vec(n, center=1.0, spread=0.1):
        return (center + spread * rng.standard_normal(n)).astype(np.float32)

    t = {"token_embd.weight": mat(N_VOCAB, N_EMBD), "output_norm.weight": vec(N_EMBD),
         "output.weight": mat(N_VOCAB, N_EMBD)}
    q_dim, kv_dim = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    for i in range(N_LAYER):
        p = f"blk.{i}."
        t |= {p + "attn_norm.weight": vec(N_EMBD), p + "ffn_norm.weight": vec(N_EMBD),
              p + "attn_q.weight": mat(q_dim, N_EMBD), p + "attn_k.weight": mat(kv_dim, N_EMBD),
              p + "attn_v.weight": mat(kv_dim, N_EMBD), p + "attn_output.weight": mat(N_EMBD, q_dim)}
        if arch == "qwen3moe":
            def stack(rows, cols):
                return np.stack([mat(rows, cols) for _ in range(N_EXPERT)])
            t |= {p + "ffn_gate_inp.weight": 3.0 * mat(N_EXPERT, N_EMBD),
                  p + "ffn_gate_exps.weight": stack(N_FF_EXP, N_EMBD), p + "ffn_up_exps.weight": stack(N_FF_EXP, N_EMBD),
                  p + "ffn_down_exps.weight": stack(N_EMBD, N_FF_EXP)}
        else:
            t |= {p + "ffn_gate.weight": mat(N_FF, N_EMBD), p + "ffn_up.weight": mat(N_FF, N_EMBD),
                  p + "ffn_down.weight": mat(N_EMBD, N_FF)}
        if arch == "qwen2":
            t |= {p + "attn_q.bias": vec(q_dim, 0.0, 0.5), p + "attn_k.bias": vec(kv_dim, 0.0, 0.5),
                  p + "attn_v.bias": vec(kv_dim, 0.0, 0.5)}
        else:
            t |= {p + "attn_q_norm.weight": vec(HEAD_DIM), p + "attn_k_norm.weight": vec(HEAD_DIM)}
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(256)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_freq_base(BASE)
    w.add_layer_norm_rms_eps(EPS)
    if arch == "qwen3moe":
        w.add_expert_count(N_EXPERT)
        w.add_expert_used_count(N_EXPERT_USED)
        if expert_ff_key:
            w.add_expert_feed_forward_length(N_FF_EXP)
    for name, value in t.items():
        w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {k: v.astype(np.float64) for k, v in t.items()}


def rms(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w


def rope_neox(x, pos):  # x: (n_tok, n_heads, head_dim)
    half = HEAD_DIM // 2
    theta = pos[:, None] * BASE ** (-2.0 * np.arange(half) / HEAD_DIM)   # (n_tok, half)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)


def experts(t: dict, p: str, h: np.ndarray) -> np.ndarray:
    """Qwen3-MoE's FFN: softmax over the router's scores, the top N_EXPERT_USED renormalised."""
    probs = np.exp(h @ t[p + "ffn_gate_inp.weight"].T)
    probs /= probs.sum(-1, keepdims=True)
    out = np.zeros_like(h)
    for i, row in enumerate(h):
        top = np.argsort(-probs[i])[:N_EXPERT_USED]
        for e in top:
            g, u = t[p + "ffn_gate_exps.weight"][e] @ row, t[p + "ffn_up_exps.weight"][e] @ row
            out[i] += probs[i, e] / probs[i, top].sum() * (t[p + "ffn_down_exps.weight"][e] @ (g / (1 + np.exp(-g)) * u))
    return out


def reference(t: dict, arch: str, tokens: list[int]) -> np.ndarray:
    n = len(tokens)
    pos = np.arange(n, dtype=np.float64)
    x = t["token_embd.weight"][tokens]
    for i in range(N_LAYER):
        p = f"blk.{i}."
        h = rms(x, t[p + "attn_norm.weight"])
        q, k, v = (h @ t[p + f"attn_{m}.weight"].T for m in "qkv")
        if arch == "qwen2":
            q, k, v = q + t[p + "attn_q.bias"], k + t[p + "attn_k.bias"], v + t[p + "attn_v.bias"]
        q, k, v = q.reshape(n, N_HEAD, HEAD_DIM), k.reshape(n, N_HEAD_KV, HEAD_DIM), v.reshape(n, N_HEAD_KV, HEAD_DIM)
        if arch in ("qwen3", "qwen3moe"):
            q, k = rms(q, t[p + "attn_q_norm.weight"]), rms(k, t[p + "attn_k_norm.weight"])
        q, k = rope_neox(q, pos), rope_neox(k, pos)
        rep = N_HEAD // N_HEAD_KV
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(HEAD_DIM)
        scores += np.triu(np.full((n, n), -np.inf), 1)
        att = np.exp(scores - scores.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", att, v).reshape(n, -1)
        x = x + o @ t[p + "attn_output.weight"].T
        h = rms(x, t[p + "ffn_norm.weight"])
        if arch == "qwen3moe":
            x = x + experts(t, p, h)
            continue
        g, u = h @ t[p + "ffn_gate.weight"].T, h @ t[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ t[p + "ffn_down.weight"].T
    return rms(x, t["output_norm.weight"]) @ t["output.weight"].T


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "qwen3moe"])
def test_qwen_matches_reference(tmp_path, arch):
    path = tmp_path / f"{arch}.gguf"
    weights = make_model(path, arch)
    ref = reference(weights, arch, TOKENS)
    engine = Engine(path, n_ctx=32, n_threads=2, kv_type="f32")
    assert engine.arch == arch
    got = np.stack([engine.decode([0], [t])[0] for t in TOKENS])
    scale = np.abs(ref).max(axis=1, keepdims=True)
    assert np.all(np.abs(got - ref) <= 2e-5 * scale), float((np.abs(got - ref) / scale).max())


def test_qwen3moe_without_expert_width_key_takes_llama_cpps_default(tmp_path):
    """No expert_feed_forward_length: llama.cpp reads an expert's width as feed_forward_length /
    expert_used_count (96 / 3 = 32 here), so the file's [64, 32, 6] experts load and compute."""
    assert N_FF // N_EXPERT_USED == N_FF_EXP
    path = tmp_path / "qwen3moe.gguf"
    weights = make_model(path, "qwen3moe", expert_ff_key=False)
    engine = Engine(path, n_ctx=32, n_threads=2, kv_type="f32")
    ref = reference(weights, "qwen3moe", TOKENS[:4])
    got = np.stack([engine.decode([0], [t])[0] for t in TOKENS[:4]])
    assert np.all(np.abs(got - ref) <= 2e-5 * np.abs(ref).max(axis=1, keepdims=True))


def test_qwen2_without_biases_is_refused(tmp_path, tiny_model_factory):
    path = tiny_model_factory(dtype="F32", arch="qwen2")
    with pytest.raises(ValueError, match="missing tensor 'blk.0.attn_q.bias'"):
        Engine(path, n_ctx=16)
