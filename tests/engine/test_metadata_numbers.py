"""Float hyper-parameters a crafted or damaged file may hold (NaN, infinite, negative, zero): the engine
refuses them at load, naming the key, and check_model (the installer's and `strata models`' question) says
the same. They loaded before and every request failed with 'logits contain NaN' (GGUF fuzzing, session 19).
Not here: the structure of the file (tests/gguf), integer sizes (tests/cli/test_damaged_model_files.py)."""

from __future__ import annotations

import pytest

from tests.fixtures.gguf_bytes import FLOAT32, FLOAT64, Val
from tests.fixtures.gguf_rewrite import rewrite_metadata

engine = pytest.importorskip("strata.engine")

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(("key", "value", "says"), [
    ("llama.attention.layer_norm_rms_epsilon", Val(FLOAT32, -1.0), "layer_norm_rms_epsilon -1 must be"),
    ("llama.attention.layer_norm_rms_epsilon", Val(FLOAT32, NAN), "layer_norm_rms_epsilon nan must be"),
    ("llama.attention.layer_norm_rms_epsilon", Val(FLOAT64, 1e300), "layer_norm_rms_epsilon inf must be"),
    ("llama.rope.freq_base", Val(FLOAT32, NAN), "rope.freq_base nan must be"),
    ("llama.rope.freq_base", Val(FLOAT32, 0.0), "rope.freq_base 0 must be"),
    ("llama.rope.freq_base", Val(FLOAT32, -INF), "rope.freq_base -inf must be"),
    ("llama.rope.scaling.factor", Val(FLOAT32, INF), "rope.scaling.factor inf must be"),
    ("llama.rope.scaling.attn_factor", Val(FLOAT32, INF), "rope.scaling.attn_factor inf must be positive and finite"),
])
def test_a_float_no_model_has_is_refused_at_load_naming_the_key(tiny_model_factory, tmp_path, key, value, says):
    src = tiny_model_factory(n_vocab=512, seed=4)
    path = rewrite_metadata(src, tmp_path / "crafted.gguf", {key: value})
    with pytest.raises(ValueError, match="must be") as err:
        engine.Engine(path, n_ctx=64, n_threads=1)
    assert says in str(err.value) and str(path) in str(err.value), str(err.value)
    with pytest.raises(ValueError) as err:
        engine.check_model(path)
    assert says in str(err.value), str(err.value)


def test_the_untouched_rewrite_loads(tiny_model_factory, tmp_path):
    """The rewrite itself changes nothing the engine reads (so the refusals above are the values')."""
    src = tiny_model_factory(n_vocab=512, seed=4)
    path = rewrite_metadata(src, tmp_path / "same.gguf", {})
    e = engine.Engine(path, n_ctx=64, n_threads=1)
    assert e.generate(e.tokenize("hello"), 2)


@pytest.mark.parametrize(("arch", "key", "says"), [
    ("gemma3", "gemma3.final_logit_softcapping", "final_logit_softcapping"),
    ("gemma3", "gemma3.rope.freq_base_swa", "rope.freq_base_swa"),
])
def test_a_double_past_float_range_is_refused(tiny_model_factory, tmp_path, arch, key, says):
    """1e300 as a FLOAT64 is finite as a double and infinite as the float the engine keeps: it passed the
    check on the double and made the logits NaN (GGUF fuzzing of a tiny gemma3)."""
    src = tiny_model_factory(arch=arch, n_vocab=512, seed=4)
    path = rewrite_metadata(src, tmp_path / "crafted.gguf", {key: Val(FLOAT64, 1e300)})
    with pytest.raises(ValueError, match=says):
        engine.Engine(path, n_ctx=64, n_threads=1)
