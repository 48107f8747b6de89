"""A code completion of megabytes (/infill's input_prefix, /v1/completions' prompt with a suffix) is laid out and
tokenized in a worker thread: fim_prompt ran in the handler, on the event loop, so every other client waited for
its tokenizing (review of c34d9f5, which moved only the plain completions' prompt_tokens off the loop). A real
strata serve with a FIM model (test_infill_api's)."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model
from tests.server.live import LiveServer
from tests.server.test_hostile_client import while_another_client_asks

LONG = "x = 1\n" * 500_000     # 3 MB


@pytest.fixture(scope="module")
def server(tiny_model_factory, tmp_path_factory):
    plain = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, added_tokens=FIM_TEXTS)
    with LiveServer(model=str(fim_model(plain, tmp_path_factory.mktemp("fim") / "coder.gguf")), ctx=4096,
                    batch=1, threads=1, conversation_cache_mib=0) as s:
        yield s


@pytest.mark.parametrize("path,body", [
    ("/infill", {"input_prefix": LONG, "input_suffix": "\n", "n_predict": 1}),
    ("/v1/completions", {"prompt": LONG, "suffix": "\n", "max_tokens": 1}),
], ids=["infill", "completions_suffix"])
def test_a_code_completion_of_megabytes_does_not_hold_other_clients(server, path, body):
    r, took, worst = while_another_client_asks(server.url, lambda: httpx.post(server.url + path, json=body,
                                                                               timeout=300))
    assert r.status_code == 200, r.text[:300]
    assert worst < max(0.5, took / 4), (worst, took)
