"""tests/cache/conftest.py's autouse check (no spill writer left behind) blames a test only for the caches it
opened. It took any writer thread started during the test as the test's own: a cache opened before it (a
module's shared cache, closed at the module's end) whose writer starts at this test's first park to disk failed
this test at teardown ("1 spill writer(s) left running"), and would fail whichever test of a loaded CI run first
parks there. Real cache, real files, the simulated engine."""

from __future__ import annotations

import pytest
from strata.server.cache import CacheConfig, ConversationCache
from strata.server.cache.memory import FixedMemory

from tests.cache.conftest import Clock, history, park_history
from tests.cache.sim_engine import SimEngine, SimFormat


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """One cache for the module's tests, closed at its end; its spill writer starts at the first park to disk."""
    root = tmp_path_factory.mktemp("shared")
    values = {"conversation_cache_mib": 0, "conversation_cache_cold_mib": 64, "conversation_cache_cold_dir": str(root),
              "conversation_cache_min_free_mib": 0, "conversation_cache_park_min_free_mib": 0,
              "conversation_cache_sessions_dir": str(root / "sessions")}
    cache = ConversationCache(CacheConfig.from_values(values, {}), SimEngine(), image_format=SimFormat,
                              memory=FixedMemory(100_000), clock=Clock())
    yield cache
    cache.close(persist=False)


def test_a_park_into_a_cache_the_test_did_not_open(shared_cache):
    assert shared_cache._spill._thread is None   # not started yet: this park starts it
    park_history(shared_cache, history(1, 40))
    shared_cache.flush()
    assert len(shared_cache.cascade.levels[-1].entries) == 1
