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
