"""Fixtures of the monitor tests: a real server (in-process, loopback, tiny model) with an API key."""

from __future__ import annotations

import pytest

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


@pytest.fixture
def artifacts():
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "test-artifacts" / "monitor"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def _restore_application_look():
    """The monitor window sets the application's palette and style (Fusion); other parts' Qt tests
    in the same session get theirs back."""
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance()
    saved = (app.palette(), app.style().name()) if app is not None else None
    yield
    app = QApplication.instance()
    if saved is not None and app is not None:
        app.setPalette(saved[0])
        app.setStyle(saved[1])
