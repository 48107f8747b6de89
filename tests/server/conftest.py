"""Fixtures of the server tests: a tiny generated model and live servers on loopback built on it."""

from __future__ import annotations

import pytest

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
