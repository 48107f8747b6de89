"""The CUDA backend against the CPU backend and the NumPy reference; skipped without a CUDA build and device.

What it checks, on tiny models of every weight type and on the default model:
- logits at every position against the fixtures' float64 reference (as tests/engine does for the CPU);
- the bitwise rule on the GPU: prefill chunking, decode == prefill of one more token, batched ==
  separate decodes, copy / truncate / snapshot restore + prefill == a fresh prefill (np.array_equal);
- snapshots cross backends: an image taken on one restores on the other (same KV layout) and the
  continued logits agree within tolerance;
- the default model: logits and 32 greedy tokens against the CPU backend (equal, except at a near
  tie where the CPU's own top-2 margin is under 2% of its logit scale), and the device report.

Tolerances (relative to the position's largest |reference logit|): the GPU multiplies f16
activations (bf16 for BF16 weights) with f16-rounded weights on tensor cores, f32 accumulation.
- F32 / F16: 1e-2. Measured here: the NumPy reference run entirely in float16 (weights, activations,
  norms, softmax, sums) stays within 2.8e-3 of float64 on every type's tiny model; the GPU rounds
  less than that (f32 accumulation, norms and softmax in f32).
- BF16: 5e-2 (activations rounded to bf16, 2^-8: about 8x the f16 figure above, with margin);
- quantized: the CPU's own bounds (6e-2 for 32-blocks, 8e-2 for K-quants); the GPU rounds activations
  less than the CPU's 8-bit blocks, so it sits inside them. A wrong block decode is > 30%.
`STRATA_TEST_GPU_BACKEND=cpu` runs this file against the CPU backend (a dry run of the test logic on a
machine without a GPU).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from strata.engine import Engine
from strata.engine.gpu import cuda_built, cuda_devices

from tests.fixtures.reference import reference_logits
from tests.fixtures.tiny_gguf import ALL_TYPES, K_QUANT_SHAPE, K_QUANT_TYPES

BACKEND = os.environ.get("STRATA_TEST_GPU_BACKEND", "cuda")
pytestmark = pytest.mark.skipif(BACKEND == "cuda" and not (cuda_built() and cuda_devices()),
                                reason="needs a CUDA build (-Ccmake.define.STRATA_CUDA=ON) and a CUDA device")

TOKENS = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12]
PROMPT = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12, 44, 45, 46, 47, 48]
NEXT = [77, 78, 79]


def tolerance(dtype: str) -> float:
    if dtype in ("F32", "F16"):
        return 1e-2
    if dtype == "BF16":
        return 5e-2
    return 8e-2 if dtype in K_QUANT_TYPES else 6e-2


def gpu_engine(path, **kw) -> Engine:
    kw.setdefault("n_threads", 2)
    return Engine(path, backend=BACKEND, **kw)


def check_close(got: np.ndarray, ref: np.ndarray, rel: float, min_cos: float = 0.998) -> None:
    got, ref = np.atleast_2d(got), np.atleast_2d(ref)
    scale = np.abs(ref).max(axis=1)
    err = np.abs(got - ref).max(axis=1)
    worst = int(np.argmax(err / scale))
    assert np.all(np.isfinite(got)), "non-finite logits"
    assert np.all(err <= rel * scale), f"position {worst}: error {err[worst]:.3g} > {rel} x {scale[worst]:.3g}"
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > min_cos, f"cosine similarity {cos.min():.5f}"


def logits_every_position(engine: Engine, tokens: list[int]) -> np.ndarray:
    return np.stack([engine.decode([0], [t])[0] for t in tokens])


# ---------------------------------------------------------------- each kernel alone

@pytest.mark.skipif(BACKEND != "cuda", reason="kernel self-test needs the CUDA backend")
def test_every_kernel_against_host_loops():
    from strata.engine.gpu import selftest

    results = selftest()
    # matmul + decode bits + embed per type; prefill tiles: 2 shapes x (vs host, decode bits) per type;
    # 6 wide products (more than 8 chunks) x (vs host, decode bits); norm/swiglu; attention 200
    # positions; attention batches x 3 KV types
    assert len(results) == 11 * 3 + 11 * 2 * 2 + 6 * 2 + 4 + 3 + 3 * 2
    bad = [f"{r['name']}: error {r['error']:.3g} > {r['limit']:.3g}" for r in results if not r["ok"]]
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------- accuracy, every type

@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_every_type_matches_reference(tiny_model_factory, dtype):
    shape = K_QUANT_SHAPE if dtype in K_QUANT_TYPES else {}
    path = tiny_model_factory(dtype=dtype, seed=3, **shape)
    ref = reference_logits(path, TOKENS)
    kv_types = ("f32", "f16") if dtype in ("F32", "F16", "BF16") else ("f16",)
    for kv in kv_types:
        e = gpu_engine(path, n_ctx=64, kv_type=kv)
        check_close(logits_every_position(e, TOKENS), ref, tolerance(dtype), 0.995 if dtype == "BF16" else 0.998)
        # the same positions by one prefill (the prefill tile of the product kernel) end the same
        e.truncate(0, 0)
        e.prefill(0, TOKENS)
        check_close(e.logits(0), ref[-1], tolerance(dtype))


def test_q8_0_kv_and_mixed_types_like_k_quant_m_files(tiny_model_factory):
    path = tiny_model_factory(dtype="Q4_K", seed=7, type_overrides={"output": "Q6_K", "token_embd": "Q8_0",
                                                                    "attn_v": "Q5_K", "ffn_down": "Q6_K"},
                              **K_QUANT_SHAPE)
    ref = reference_logits(path, TOKENS)
    for kv in ("f16", "q8_0"):
        e = gpu_engine(path, n_ctx=64, kv_type=kv)
        check_close(logits_every_position(e, TOKENS), ref, 8e-2 if kv == "f16" else 1e-1)


@pytest.mark.parametrize("params", [
    {"tied_embeddings": True},
    {"n_head": 8, "n_head_kv": 1, "n_embd": 128},
    {"n_layer": 3, "rope_freq_base": 100000.0, "rms_eps": 1e-6},
])
def test_shapes_and_options_match_reference(tiny_model_factory, params):
    path = tiny_model_factory(dtype="F16", seed=5, **params)
    e = gpu_engine(path, n_ctx=64, kv_type="f32")
    check_close(logits_every_position(e, TOKENS), reference_logits(path, TOKENS), 1e-2)


def test_long_context_crosses_attention_tiles(tiny_model_factory):
    """300 positions: the attention kernel's running softmax spans three 128-position tiles."""
    path = tiny_model_factory(dtype="F16", seed=9)
    tokens = [int(t) for t in np.random.default_rng(0).integers(3, 512, 300)]
    e = gpu_engine(path, n_ctx=320, kv_type="f32")
    e.prefill(0, tokens, chunk=128)
    check_close(e.logits(0), reference_logits(path, tokens)[-1], 1e-2)


# ---------------------------------------------------------------- the bitwise rule on the GPU

@pytest.fixture(scope="module", params=["Q4_1", "Q4_K"])
def engine(request, tiny_model_factory):
    shape = K_QUANT_SHAPE if request.param.endswith("_K") else {}
    path = tiny_model_factory(dtype=request.param, seed=11, **shape)
    return gpu_engine(path, n_ctx=128, n_slots=4, n_groups=2)


def fresh_logits(engine: Engine, tokens: list[int], ctx: int = 1) -> np.ndarray:
    engine.truncate(ctx, 0)
    engine.prefill(ctx, tokens)
    return engine.logits(ctx)


def test_prefill_chunking_does_not_change_logits(engine):
    want = fresh_logits(engine, PROMPT)
    for chunk in (1, 2, 7, 16, 17, 512):   # 16 / 17: either side of the product kernel's decode tile
        engine.truncate(1, 0)
        engine.prefill(1, PROMPT, chunk=chunk)
        assert np.array_equal(engine.logits(1), want), f"chunk={chunk}"


def test_decode_equals_prefill_of_one_more_token(engine):
    want = fresh_logits(engine, PROMPT + NEXT[:1])
    fresh_logits(engine, PROMPT)
    assert np.array_equal(engine.decode([1], NEXT[:1])[0], want)


def test_batched_decode_equals_separate_decodes(engine):
    prompts = {1: PROMPT, 2: PROMPT[:9], 3: PROMPT[4:], 4: [5, 6]}
    separate = {}
    for ctx, p in prompts.items():
        fresh_logits(engine, p, ctx)
        separate[ctx] = [engine.decode([ctx], [t])[0] for t in NEXT]
    for ctx, p in prompts.items():
        fresh_logits(engine, p, ctx)
    for step, t in enumerate(NEXT):
        order = [4, 2, 1, 3] if step % 2 else [1, 2, 3, 4]
        out = engine.decode(order, [t] * 4)
        for row, ctx in enumerate(order):
            assert np.array_equal(out[row], separate[ctx][step]), f"ctx {ctx} step {step}"


def test_copy_truncate_and_restore_equal_fresh_prefill(engine):
    want = fresh_logits(engine, PROMPT + NEXT, 3)
    fresh_logits(engine, PROMPT, 1)
    engine.copy(1, 2, len(PROMPT))
    assert np.array_equal(engine.logits(2), engine.logits(1))
    engine.prefill(2, NEXT)
    assert np.array_equal(engine.logits(2), want), "copy"
    engine.copy(1, 4, 10)
    engine.prefill(4, PROMPT[10:] + NEXT)
    assert np.array_equal(engine.logits(4), want), "copy of a prefix"
    fresh_logits(engine, PROMPT + [400, 401], 2)
    engine.truncate(2, len(PROMPT))
    engine.prefill(2, NEXT)
    assert np.array_equal(engine.logits(2), want), "truncate"
    image = engine.snapshot(1)
    fresh_logits(engine, [9, 9, 9], 2)
    assert engine.restore(2, image) == len(PROMPT)
    assert engine.context_tokens(2) == PROMPT
    engine.prefill(2, NEXT)
    assert np.array_equal(engine.logits(2), want), "restore"
    # the main context (another capacity) restores the slot's image too
    engine.truncate(0, 0)
    assert engine.restore(0, image) == len(PROMPT)
    engine.prefill(0, NEXT)
    assert np.array_equal(engine.logits(0), want), "restore into main"


def test_cuda_graphs_change_no_bit(tiny_model_factory, monkeypatch):
    """Decode steps (batches of <= 16 rows) replay captured CUDA graphs; STRATA_CUDA_GRAPHS=0 launches
    the same kernels one by one. Same bits either way, batched or not."""
    path = tiny_model_factory(dtype="Q5_K", seed=17, **K_QUANT_SHAPE)
    outs = []
    for graphs in ("1", "0"):
        monkeypatch.setenv("STRATA_CUDA_GRAPHS", graphs)
        e = gpu_engine(path, n_ctx=64, n_slots=2)
        e.prefill(1, PROMPT)
        e.prefill(2, PROMPT[:5])
        steps = [e.decode([1, 2], [t, t]) for t in NEXT] + [e.decode([2], [NEXT[0]])]
        outs.append(np.concatenate([s.ravel() for s in steps]))
    assert np.array_equal(outs[0], outs[1])


# ---------------------------------------------------------------- snapshots across backends

def test_snapshots_cross_backends(tiny_model_factory):
    path = tiny_model_factory(dtype="Q8_0", seed=13)
    gpu = gpu_engine(path, n_ctx=64)
    cpu = Engine(path, n_ctx=64, n_threads=2)
    assert gpu.kv_layout() == cpu.kv_layout()
    for src, dst in ((gpu, cpu), (cpu, gpu)):
        want = fresh_logits(dst, PROMPT + NEXT, 0)
        fresh_logits(src, PROMPT, 0)
        dst.truncate(0, 0)
        assert dst.restore(0, src.snapshot(0)) == len(PROMPT)
        assert dst.context_tokens(0) == PROMPT
        dst.prefill(0, NEXT)
        check_close(dst.logits(0), want, 6e-2)


# ---------------------------------------------------------------- the default model

@pytest.fixture(scope="module")
def default_pair(default_model_path):
    return (gpu_engine(default_model_path, n_ctx=512, n_slots=2),
            Engine(default_model_path, n_ctx=512, n_slots=2, n_threads=2))


def test_default_model_logits_match_cpu(default_pair):
    gpu, cpu = default_pair
    prompt = cpu.tokenize("The capital of France is")
    check_close(fresh_logits(gpu, prompt, 1), fresh_logits(cpu, prompt, 1), 6e-2)


def test_default_model_greedy_matches_cpu_for_32_tokens(default_pair):
    gpu, cpu = default_pair
    prompt = cpu.tokenize(cpu.apply_chat_template([{"role": "user", "content": "Write a haiku about the sea."}]))
    g = gpu.generate(prompt, 32, stop_tokens=[])
    c = cpu.generate(prompt, 32, stop_tokens=[])
    assert len(g) == len(c) == 32
    diverge = next((i for i in range(32) if g[i] != c[i]), None)
    if diverge is not None:   # allowed only at a near tie of the CPU's own logits
        logits = fresh_logits(cpu, prompt + c[:diverge], 1)
        margin = float(logits[c[diverge]] - logits[g[diverge]])
        scale = float(np.abs(logits).max())
        assert margin <= 0.02 * scale, f"token {diverge}: GPU {g[diverge]} vs CPU {c[diverge]}, margin {margin:.3f}"


def test_device_report(default_pair):
    gpu, _ = default_pair
    info = gpu.gpu()
    if BACKEND == "cpu":
        assert info is None and gpu.backend.startswith("cpu-")
        return
    assert gpu.backend.startswith("cuda-sm")
    assert info["name"] and info["vram_total"] > info["vram_free"] >= 0
    assert info["vram_used"] >= info["weight_bytes"] + info["kv_bytes"]
    assert info["kv_bytes"] == 3 * 512 * gpu.bytes_per_token   # main + 2 slots of 512 tokens


def test_mxfp4_weights_are_refused_by_name(tiny_model_factory):
    """MXFP4 (gpt-oss's experts) has CPU kernels only: the CUDA backend names the type when it loads
    the model, instead of failing at the first product."""
    if BACKEND != "cuda":
        pytest.skip("the CPU backend computes MXFP4 (tests/engine/test_logits_reference.py)")
    with pytest.raises(ValueError, match=r"weight type MXFP4 has no CUDA kernel"):
        gpu_engine(tiny_model_factory(dtype="MXFP4", seed=3), n_ctx=32)
