"""Mixture-of-experts models (Mixtral-style llama files, qwen3moe in test_qwen.py): the engine's
logits against the fixtures' NumPy reference in every expert weight type, the mixes real files use,
every count of experts a token may run, and the errors of malformed expert metadata or tensors.

Not here: batching and chunking parity (test_bitwise.py runs its cases on an expert model too).
Tolerances are test_logits_reference.py's (the same reasons: float32 rounding, or activations
quantized to 8 bits per block for the quantized products). Quantized experts are checked in one
layer whose other matrices are F32: the router then reads what the reference's reads (to float32
rounding), so both choose the same experts. After a quantized layer they may not: a token whose
2nd and 3rd router scores lie closer than the products' error (measured: 0.009 apart in a 2-layer
Q5_0 model) runs another expert in each, which no tolerance short of "anything" covers.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from strata.engine import Engine, _engine

from tests.engine.test_logits_reference import TOKENS, check_close, logits_every_position, tolerance
from tests.fixtures.reference import reference_logits
from tests.fixtures.tiny_gguf import ALL_TYPES, K_QUANT_SHAPE, K_QUANT_TYPES


def expert_model(factory, dtype: str = "F32", **params):
    """A model with experts; quantized experts in one layer whose other matrices are F32."""
    shape = K_QUANT_SHAPE if dtype in K_QUANT_TYPES else {}
    if dtype != "F32":
        exact = {role: "F32" for role in ("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_output")}
        params["type_overrides"] = exact | params.get("type_overrides", {})
        params["n_layer"] = 1
    return factory(dtype=dtype, seed=3, n_expert=params.pop("n_expert", 8),
                   n_expert_used=params.pop("n_expert_used", 2), **shape, **params)


@pytest.mark.parametrize("dtype", ALL_TYPES)
def test_every_expert_type_matches_reference(tiny_model_factory, dtype):
    path = expert_model(tiny_model_factory, dtype)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    assert (engine.n_expert, engine.n_expert_used) == (8, 2)
    check_close(logits_every_position(engine, TOKENS), reference_logits(path, TOKENS), tolerance(dtype, "f32"))


@pytest.mark.parametrize("overrides", [
    {"ffn_down": "Q6_K", "output": "Q6_K"},    # a Q4_K_M file: down in another type than gate and up
    {"ffn_up": "Q8_0", "ffn_down": "Q5_K"},    # gate and up in different types (two activation formats)
])
def test_mixed_expert_types_match_reference(tiny_model_factory, overrides):
    path = expert_model(tiny_model_factory, "Q4_K", type_overrides=overrides)
    engine = Engine(path, n_ctx=64, n_threads=2)
    check_close(logits_every_position(engine, TOKENS), reference_logits(path, TOKENS), 8e-2)


@pytest.mark.parametrize("n_expert, n_expert_used", [(4, 1), (4, 4), (16, 3)])
def test_expert_counts_match_reference(tiny_model_factory, n_expert, n_expert_used):
    path = expert_model(tiny_model_factory, n_expert=n_expert, n_expert_used=n_expert_used)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    check_close(logits_every_position(engine, TOKENS), reference_logits(path, TOKENS), 2e-5)


def test_a_prompt_read_at_once_matches_reference(tiny_model_factory):
    """Prefill: all rows of one forward through the experts together, each expert once over its rows."""
    path = expert_model(tiny_model_factory, "Q8_0", n_expert=16, n_expert_used=4)
    engine = Engine(path, n_ctx=64, n_threads=2)
    engine.prefill(0, TOKENS)
    ref = reference_logits(path, TOKENS)[-1:]
    check_close(engine.logits(0)[None], ref, 6e-2)


def test_experts_change_the_answer(tiny_model_factory):
    """The same weights with another number of experts a token: other logits (the router is used)."""
    one = Engine(expert_model(tiny_model_factory, n_expert_used=1), n_ctx=32, kv_type="f32")
    two = Engine(expert_model(tiny_model_factory, n_expert_used=2), n_ctx=32, kv_type="f32")
    a, b = one.decode([0], [5])[0], two.decode([0], [5])[0]
    assert np.abs(a - b).max() > 0.05 * np.abs(a).max()


def rewrite(src, dst, *, drop: str = "", kv: dict | None = None, tensors: dict | None = None,
            scale: dict | None = None) -> None:
    """Copies a GGUF file with metadata keys changed or added (kv: an int, a list of bools, or a
    (value, GGUFValueType) pair, or (list, ARRAY, element GGUFValueType)), a key or tensor left out (drop), tensors renamed to several
    (tensors), or the F32 tensors whose names end with a key of `scale` multiplied by its value."""
    reader = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(dst), reader.get_field("general.architecture").contents())
    kv = dict(kv or {})
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name == drop:
            continue
        if f.name in kv and isinstance(kv[f.name], list | tuple):   # a new form for the key: written below
            continue
        value = kv.pop(f.name, f.contents())
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, value, vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, value, vtype)
    for name, value in kv.items():
        if isinstance(value, tuple):   # (value, type) or (value, ARRAY, element type)
            w.add_key_value(name, *value)
        elif isinstance(value, list):
            w.add_key_value(name, value, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.BOOL)
        else:
            w.add_key_value(name, value, gguf.GGUFValueType.INT32)
    for t in reader.tensors:
        if t.name == drop:
            continue
        data = np.asarray(t.data).reshape([int(d) for d in reversed(t.shape)] if t.tensor_type == 0 else t.data.shape)
        for suffix, factor in (scale or {}).items():
            if t.name.endswith(suffix):
                data = data * np.float32(factor)
        split = (tensors or {}).get(t.name)
        if split:
            for i in range(data.shape[0]):
                w.add_tensor(split.format(i), np.ascontiguousarray(data[i]), raw_dtype=t.tensor_type)
        else:
            w.add_tensor(t.name, np.ascontiguousarray(data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("kv, message", [
    ({"llama.expert_used_count": 9}, "invalid experts in metadata (expert_count 8, expert_used_count 9"),
    ({"llama.expert_used_count": 0}, "expert_used_count 0"),
    ({"llama.expert_count": 4}, "ffn_gate_inp.weight' has shape [64, 8], expected [64, 4]"),
])
def test_bad_expert_metadata_is_refused_by_name(tiny_model_factory, tmp_path, kv, message):
    bad = tmp_path / "bad.gguf"
    rewrite(expert_model(tiny_model_factory), bad, kv=kv)
    with pytest.raises(ValueError) as err:
        Engine(bad, n_ctx=16)
    assert message in str(err.value)


def test_old_one_tensor_per_expert_layout_is_refused_with_advice(tiny_model_factory, tmp_path):
    bad = tmp_path / "old.gguf"
    rewrite(expert_model(tiny_model_factory), bad, tensors={
        f"blk.{i}.ffn_{m}_exps.weight": f"blk.{i}.ffn_{m}.{{}}.weight" for i in range(2) for m in ("gate", "up", "down")})
    with pytest.raises(ValueError, match=r"experts stored one tensor each \('blk.0.ffn_gate.0.weight'\).*convert"):
        Engine(bad, n_ctx=16)


def test_cuda_backend_refuses_experts_and_auto_runs_them_on_the_cpu(tiny_model_factory):
    path = expert_model(tiny_model_factory)
    with pytest.raises(ValueError, match=r"backend 'cuda': models with experts \(llama, 8 experts\) run on the CPU"):
        _engine.Engine(str(path), n_ctx=16, backend="cuda")   # the native check, in any build
    assert Engine(path, n_ctx=16, backend="auto").backend.startswith("cpu")


def test_auto_on_a_machine_with_cuda_runs_experts_on_the_cpu(tiny_model_factory, monkeypatch):
    """"auto" where CUDA is usable (resolve_backend says so; no GPU here to say it for real): a model with
    experts still opens, on the CPU; a dense model goes on to the CUDA backend (which this build lacks)."""
    import strata.engine.gpu as gpu

    monkeypatch.setattr(gpu, "resolve_backend", lambda name: "cuda")
    assert Engine(expert_model(tiny_model_factory), n_ctx=16, backend="auto").backend.startswith("cpu")
    if not gpu.cuda_built():
        with pytest.raises(ValueError, match="backend 'cuda'"):
            Engine(tiny_model_factory(dtype="F32", seed=3), n_ctx=16, backend="auto")


def test_many_narrow_experts_over_long_chunks_and_extend_are_bitwise_stable(tiny_model_factory):
    """128 experts of 40 rows (not a multiple of 64), 8 a token: a 150-token prompt read 1, 100 or 150
    rows at a time (or by an engine whose scratch holds one row) ends in the same logits (rows of one forward share some experts and not others), as
    the reference computes them; extend's rows over two contexts equal their one-at-a-time decodes."""
    path = expert_model(tiny_model_factory, n_expert=128, n_expert_used=8, n_ff=40)
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, 500, 150)]
    engine = Engine(path, n_ctx=256, n_slots=2, n_threads=2, kv_type="f32", max_chunk=150)
    last = []
    for chunk in (1, 100, 150):
        engine.truncate(0, 0)
        engine.prefill(0, prompt, chunk=chunk)
        last.append(engine.logits(0))
    one_row = Engine(path, n_ctx=256, n_threads=2, kv_type="f32", max_chunk=1)   # scratch for 1 row: 8 pairs
    one_row.prefill(0, prompt)
    last.append(one_row.logits(0))
    assert all(np.array_equal(last[0], x) for x in last[1:])
    check_close(last[0][None], reference_logits(path, prompt)[-1:], 2e-5)
    engine.prefill(1, prompt[:30])
    engine.prefill(2, prompt[:31])
    together = engine.extend([(1, [8, 30, 31]), (2, [9, 40])])
    engine.truncate(1, 30)
    engine.truncate(2, 31)
    alone = [engine.decode([1], [t])[0] for t in (8, 30, 31)] + [engine.decode([2], [t])[0] for t in (9, 40)]
    assert np.array_equal(together, np.stack(alone))
