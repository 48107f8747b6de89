"""Fixtures shared by the setup tests: a process environment whose configuration, cache and data folders are
the test's own, and a configuration file whose answers are not the plan's (for setup run again)."""

from __future__ import annotations

import os

import pytest
from strata.installer import config_file


@pytest.fixture
def env(tmp_path) -> dict:
    return dict(os.environ, XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_CACHE_HOME=str(tmp_path / "cache"),
                XDG_DATA_HOME=str(tmp_path / "data"))


@pytest.fixture
def own_answers(tmp_path, tiny_model_factory):
    """A file whose answers are not the plan's: a short context, 2 slots, a 1-GiB cold level in its own folder."""
    model = tiny_model_factory(n_embd=128, n_ff=256, ctx_len=8192)
    cold = tmp_path / "big disk"
    cold.mkdir()
    path = tmp_path / "config.toml"
    path.write_text(f'{config_file.HEADER}\nmodel = "{model}"\nctx = 2048\nbatch = 2\nslot_ctx = 1024\n'
                    f'conversation_cache_cold_dir = "{cold}"\nconversation_cache_cold_mib = 1024\nport = 8123\n')
    return path
