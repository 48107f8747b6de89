"""Fixtures of the server tests: a tiny generated model and live servers on loopback built on it."""

from __future__ import annotations

import pytest

from tests.server import live
from tests.server.live import LiveServer

TINY_CTX = 4096


@pytest.fixture(scope="session")
def tiny_model(tiny_model_factory):
    """A random 2-layer llama model with a ChatML template and a 4,096-token training context."""
    return tiny_model_factory(ctx_len=TINY_CTX, n_vocab=512, seed=3)


@pytest.fixture(scope="module")
def tiny_server(tiny_model, tmp_path_factory):
    """--batch 4 --ctx 4096 --slot-ctx 2048 on the tiny model, no API key."""
    cache_dir = tmp_path_factory.mktemp("cache")
    server = LiveServer(model=str(tiny_model), ctx=TINY_CTX, batch=4, slot_ctx=2048, threads=1,
                        conversation_cache_cold_dir=str(cache_dir), conversation_cache_mib=256)
    server.start()
    yield server
    server.stop()


SCRIPT_THOUGHT, SCRIPT_ANSWER = "Plan it", "Warm"


@pytest.fixture(scope="session")
def scripted_model(tiny_model_factory):
    """A real tiny model that always answers "<think>Plan it</think>Warm" then ends its turn
    (tests/fixtures/tiny_gguf.py `script`; "<think>" and "</think>" are whole tokens, as in thinking models)."""
    return live.scripted_model(tiny_model_factory, f"<think>{SCRIPT_THOUGHT}</think>{SCRIPT_ANSWER}", ctx_len=2048,
                               n_vocab=512, seed=3, added_tokens=("<think>", "</think>"))


@pytest.fixture(scope="module")
def oai(tiny_server):
    """The `openai` SDK on tiny_server (a module that serves another model defines its own)."""
    import openai

    return openai.OpenAI(base_url=tiny_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def claude(tiny_server):
    """The `anthropic` SDK on tiny_server."""
    import anthropic

    return anthropic.Anthropic(base_url=tiny_server.url, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="session")
def fim_coder(tiny_model_factory, tmp_path_factory):
    """The path of a tiny model (a 4,096-token context) with Qwen2.5-Coder's fill-in-the-middle tokens."""
    from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model
    plain = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, added_tokens=FIM_TEXTS)
    return fim_model(plain, tmp_path_factory.mktemp("fim_coder") / "coder.gguf")


@pytest.fixture(scope="module")
def fim_cache_server(fim_coder):
    """A live server on fim_coder, four 1,024-token slots and a 2 MiB RAM conversation cache: the tests of what
    completions leave in the cache."""
    with LiveServer(model=str(fim_coder), ctx=4096, batch=4, slot_ctx=1024, threads=1, conversation_cache_mib=2) as s:
        yield s
