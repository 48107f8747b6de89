"""check_model (what setup and `strata models` trust) refuses what Engine refuses: a file it passes must
load. Found by review: the query-heads-per-KV-head limit was checked in the engine after model_load,
so check_model passed a file the server could not start; it is model_load's now."""

from __future__ import annotations

import pytest
from strata.engine import Engine, check_model


def test_a_file_the_engine_refuses_is_refused_by_check_model(tiny_model_factory):
    path = tiny_model_factory(dtype="F32", n_embd=132, n_head=66, n_head_kv=1)   # 66 query heads per KV head
    with pytest.raises(ValueError, match="more than 64 query heads per KV head"):
        Engine(path, n_ctx=16)
    with pytest.raises(ValueError, match="query heads"):
        check_model(path)


@pytest.mark.parametrize("pre", ["kimi-k2", "deepseek-v3"])   # Kimi K2's, DeepSeek-V3's (deepseek2 files)
def test_a_vocabulary_the_tokenizer_refuses_is_refused_by_check_model(tiny_model_factory, pre):
    # check_model passed it: `strata models` listed it as runnable, setup planned it, and `strata serve`
    # printed "listening on" before the load failed
    path = tiny_model_factory(arch="deepseek2", n_layer=2, n_ff=32, n_expert=4, n_expert_used=2, tokenizer_pre=pre)
    with pytest.raises(ValueError, match=f"unknown pre-tokenizer tokenizer.ggml.pre='{pre}'"):
        Engine(path, n_ctx=16).tokenize("hi")
    with pytest.raises(ValueError, match=f"unknown pre-tokenizer tokenizer.ggml.pre='{pre}'"):
        check_model(path)
    assert check_model(tiny_model_factory(arch="deepseek2", n_layer=2, n_ff=32, n_expert=4, n_expert_used=2,
                                          tokenizer_pre="glm4"))["arch"] == "deepseek2"
