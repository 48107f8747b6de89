"""Fixtures of the app tests: a configuration file for a real `strata serve` on a tiny generated model
(two slots, park target disk, a cold level and a system-prompt cache) on a free loopback port."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli_w

from tests.fixtures.qt import _restore_application_look, artifacts  # noqa: F401  (fixtures)
from tests.monitor.traffic import free_port


@pytest.fixture
def app_config(tmp_path, tiny_model_factory) -> Path:
    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)
    values = {"model": str(model), "host": "127.0.0.1", "port": free_port(), "batch": 2, "ctx": 4096,
              "threads": 1, "conversation_cache_park": "disk",
              "conversation_cache_cold_dir": str(tmp_path / "cold"), "conversation_cache_cold_mib": 64,
              "conversation_cache_system_prompt_dir": str(tmp_path / "system-prompts"),
              "conversation_cache_system_prompt_mib": 16,
              "conversation_cache_sessions_dir": str(tmp_path / "sessions")}
    path = tmp_path / "config.toml"
    path.write_text(tomli_w.dumps(values), encoding="utf-8")
    return path
