"""Two servers on one warm and one cold folder (session 39's cache trial): one of them moves a warm entry down to
cold (its budget), and the other, which indexed that entry at its start, has to make room in warm later. The move
of an entry whose files are gone failed with `No such file or directory` on the warm image, which was taken as
the cold level failing to write: a WARNING `cold level: cannot write to /cold (...)`, counted in
strata_cache_write_failures_total{level="cold"}, and warm `full and its oldest cannot degrade`, so every history
then went past the warm level to cold, at each park, until a restart. An entry whose files another process
removed is unindexed (INFO, as a lookup's hit whose files are gone is), and its room counts as free."""

from __future__ import annotations

import logging
import os
import random

import pytest
from strata.server.cache import CacheConfig, ConversationCache
from strata.server.cache.memory import FixedMemory

from tests.cache.test_engine_equality import Clock

engine_mod = pytest.importorskip("strata.engine")
N_TOKENS = 1500   # about 0.37 MiB of KV on the tiny model: two fit in a 1 MiB warm level, a third does not


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    return engine_mod.Engine(tiny_model_factory(), n_ctx=2048, n_slots=1, n_threads=1)


def open_cache(engine, warm, cold) -> ConversationCache:
    values = {"conversation_cache_mib": 0, "conversation_cache_warm_dir": str(warm), "conversation_cache_warm_mib": 1,
              "conversation_cache_cold_dir": str(cold), "conversation_cache_cold_mib": 64,
              "conversation_cache_min_free_mib": 0, "conversation_cache_park_min_free_mib": 0,
              "conversation_cache_sessions_dir": str(cold.parent / "sessions")}
    return ConversationCache(CacheConfig.from_values(values, {}), engine, memory=FixedMemory(100_000), clock=Clock())


def park(engine, cache, seed):
    engine.truncate(1, 0)
    engine.prefill(1, [random.Random(seed).randrange(3, 500) for _ in range(N_TOKENS)])
    assert cache.park(1, "overwrite").destination == "disk"
    cache.flush()


def test_an_entry_another_server_moved_down_is_unindexed_not_a_write_failure(engine, tmp_path, caplog):
    warm, cold = tmp_path / "warm", tmp_path / "cold"
    cache = open_cache(engine, warm, cold)
    park(engine, cache, 1)
    (first,) = cache.cascade.levels[0].entries.values()
    park(engine, cache, 2)
    warm_level, cold_level = cache.cascade.levels
    assert len(warm_level.entries) == 2 and not cold_level.entries
    # the other server's degrade: the image renamed into cold (under a sidecar of its own), the warm sidecar removed
    cold.mkdir(exist_ok=True)
    os.rename(first.image_path, cold / os.path.basename(first.image_path))
    os.remove(first.sidecar_path)

    with caplog.at_level(logging.INFO, logger="strata.cache"):
        park(engine, cache, 3)
    lines = [r.getMessage() for r in caplog.records]
    assert not [m for m in lines if "cannot write to" in m], lines
    assert cache.cascade.write_failures["cold"] == 0
    assert first.key not in warm_level.entries and len(warm_level.entries) == 2, list(warm_level.entries)
    assert not cold_level.entries    # the third history went to warm, where there is room now
    assert [m for m in lines if first.key in m and "removed since" in m], lines
    cache.close(persist=False)
