"""Mistral's mistral3 architecture (Devstral Small 2, Ministral 3): the engine's logits against the
fixtures' NumPy reference (tests/fixtures/reference.py), which computes the architecture's three extras
from their definition: YaRN's beta_fast / beta_slow read from the file, the YaRN log multiplier
(mscale_all_dim) and the attention temperature that grows the queries past the original context.

Two tiny models: one with an original context of 16 positions, which prompts of 48 cross twice
(temperatures 1, 1 + s ln 2, 1 + s ln 3), one of 1,024, where the betas move YaRN's ramp (at 16 it
covers every dimension pair whatever they are). Not here: batching and chunking parity (test_bitwise.py runs
its suite on a mistral3 model too); Mistral's tokenizer and tool calls (tests/text, tests/server).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from strata.engine import Engine

from strata import _engine
from tests.engine.test_logits_reference import check_close, logits_every_position, tolerance
from tests.fixtures.reference import ReferenceModel, reference_logits

LONG = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12] * 3   # 48 positions
KEYS = {"attention.temperature_scale": 0.5, "rope.scaling.yarn_log_multiplier": 0.5,
        "rope.scaling.yarn_beta_fast": 16.0, "rope.scaling.yarn_beta_slow": 2.0}


def mistral3_model(factory, dtype: str = "F32", keys: dict | None = None, orig: int = 16, **params):
    """A 2-layer mistral3 model, 64 wide, 4 heads of 16 over 2 KV heads, YaRN x4 over `orig` positions."""
    defaults = {"arch": "mistral3", "seed": 9, "rope_scaling": ("yarn", 4.0, orig),
                "rope_keys": KEYS if keys is None else keys}
    return factory(dtype=dtype, **(defaults | params))


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("orig", [16, 1024])
def test_mistral3_matches_reference(tiny_model_factory, kv_type, orig):
    path = mistral3_model(tiny_model_factory, orig=orig)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type=kv_type)
    assert engine.arch == "mistral3"
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), tolerance("F32", kv_type))


@pytest.mark.parametrize("dtype", ["Q4_K", "Q8_0"])
def test_quantized_mistral3_matches_reference(tiny_model_factory, dtype):
    from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

    path = mistral3_model(tiny_model_factory, dtype, **(K_QUANT_SHAPE if dtype == "Q4_K" else {}))
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), tolerance(dtype, "f32"))


def test_a_prompt_read_at_once_matches_reference(tiny_model_factory):
    """Prefill: each row of one forward takes its own position's temperature."""
    path = mistral3_model(tiny_model_factory)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    engine.prefill(0, LONG)
    check_close(engine.logits(0)[None], reference_logits(path, LONG)[-1:], 2e-5)


@pytest.mark.parametrize("key", sorted(KEYS))
def test_each_key_changes_the_answer(tiny_model_factory, key):
    """The checks above can fail: a reference that ignores any one key is far from the engine."""
    path = mistral3_model(tiny_model_factory, orig=1024 if "beta" in key else 16)
    got = logits_every_position(Engine(path, n_ctx=64, n_threads=2, kv_type="f32"), LONG)
    ref = ReferenceModel(path)
    field = {"attention.temperature_scale": "attn_temp_scale", "rope.scaling.yarn_log_multiplier": "yarn_log_mul",
             "rope.scaling.yarn_beta_fast": "yarn_beta_fast", "rope.scaling.yarn_beta_slow": "yarn_beta_slow"}[key]
    default = {"yarn_beta_fast": 32.0, "yarn_beta_slow": 1.0}.get(field, 0.0)
    ref.config = dataclasses.replace(ref.config, **{field: default})
    assert np.abs(got - ref.logits(LONG)).max() > 1e-3 * np.abs(got).max()


def test_the_temperature_starts_at_the_original_context(tiny_model_factory):
    """Below the original context (16 positions) the temperature is exactly 1: the logits there are the
    same bits with and without it; past it they differ."""
    hot = logits_every_position(Engine(mistral3_model(tiny_model_factory), n_ctx=64, n_threads=2), LONG)
    cold_keys = {k: v for k, v in KEYS.items() if k != "attention.temperature_scale"}
    cold = logits_every_position(Engine(mistral3_model(tiny_model_factory, keys=cold_keys), n_ctx=64,
                                        n_threads=2), LONG)
    assert np.array_equal(hot[:16], cold[:16])
    assert np.abs(hot[16:] - cold[16:]).max() > 1e-3 * np.abs(hot).max()


def test_without_yarn_the_temperature_uses_the_training_context(tiny_model_factory):
    """No rope scaling in the file: the temperature's floor is context_length (llama.cpp's original
    context then), and the YaRN keys change nothing."""
    path = mistral3_model(tiny_model_factory, rope_scaling=None, ctx_len=20)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), 2e-5)


def test_a_non_finite_key_is_refused_by_name(tiny_model_factory):
    path = mistral3_model(tiny_model_factory, keys={"attention.temperature_scale": float("nan")})
    with pytest.raises(ValueError, match="mistral3.attention.temperature_scale is not a finite number"):
        Engine(path, n_ctx=16)


@pytest.mark.parametrize("keys", [{"rope.scaling.yarn_beta_fast": 0.0}, {"rope.scaling.yarn_beta_slow": -1.0},
                                  {"rope.scaling.yarn_log_multiplier": -10.0}])
def test_yarn_keys_that_make_no_rotation_are_refused(tiny_model_factory, keys):
    """A beta of 0 or less has no logarithm; a log multiplier with 1 + 0.1 m ln(4) <= 0 divides by zero or
    flips the sign of every rotation: refused, naming the keys."""
    with pytest.raises(ValueError, match="invalid YaRN keys"):
        Engine(mistral3_model(tiny_model_factory, keys=keys), n_ctx=16)


def test_the_cuda_backend_refuses_the_temperature_by_name(tiny_model_factory):
    """The CUDA backend has no query temperature: refused before anything is allocated, in any build."""
    with pytest.raises(ValueError, match="attention temperature .*run on the CPU backend only"):
        _engine.Engine(str(mistral3_model(tiny_model_factory)), n_ctx=16, backend="cuda")


def test_backend_auto_and_the_setup_plan_keep_it_on_the_cpu(tiny_model_factory):
    """`backend auto` and `strata setup` read the temperature from the metadata: only the CPU runs it."""
    from strata.engine import GGUFFile
    from strata.installer.model_facts import read_model_facts

    from strata.model_shape import cpu_only

    hot = mistral3_model(tiny_model_factory)
    cold = mistral3_model(tiny_model_factory, keys={"rope.scaling.yarn_log_multiplier": 1.0})
    assert cpu_only(GGUFFile(str(hot)).metadata) and not cpu_only(GGUFFile(str(cold)).metadata)
    assert read_model_facts(hot).attn_temperature and not read_model_facts(cold).attn_temperature
