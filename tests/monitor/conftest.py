"""Fixtures of the monitor tests: a real server (in-process, loopback, tiny model) with an API key."""

from __future__ import annotations

import pytest

from tests.fixtures.qt import _restore_application_look, artifacts  # noqa: F401  (fixtures)
from tests.server.live import LiveServer

API_KEY = "monitor-test-key"


@pytest.fixture(scope="module")
def keyed_server(tiny_model_factory, tmp_path_factory):
    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)
    cache = tmp_path_factory.mktemp("monitor-cache")
    server = LiveServer(model=str(model), ctx=4096, batch=2, threads=1, api_key=API_KEY,
                        conversation_cache_cold_dir=str(cache / "cold"), conversation_cache_cold_mib=64)
    server.start()
    yield server
    server.stop()
