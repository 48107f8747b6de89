"""Child of test_unreadable_files_kept.py: parks three histories in a cold level (the simulated engine), makes one
sidecar and another entry's image unreadable (chmod 000), opens the level again and prints what the index made of
them as JSON. Run as a user other than root (root reads any file)."""

from __future__ import annotations

import json
import os
import sys

from strata.server.cache import CacheConfig, ConversationCache
from strata.server.cache.memory import FixedMemory

from tests.cache.conftest import Clock, history, park_history
from tests.cache.sim_engine import SimEngine, SimFormat


def open_cache(folder: str) -> ConversationCache:
    values = {"conversation_cache_mib": 0, "conversation_cache_cold_mib": 100, "conversation_cache_cold_dir": folder,
              "conversation_cache_sessions_dir": os.path.join(os.path.dirname(folder), "sessions")}
    return ConversationCache(CacheConfig.from_values(values, {}), SimEngine(), image_format=SimFormat,
                             memory=FixedMemory(100_000), clock=Clock(), piece_bytes=64 << 10)


def main(folder: str) -> None:
    cache = open_cache(folder)
    for seed in (1, 2, 3):
        park_history(cache, history(seed, 60))
    cache.flush()
    a, b, whole = sorted(cache.cascade.levels[0].entries.values(), key=lambda e: e.key)
    cache.close(persist=False)
    os.chmod(a.sidecar_path, 0)
    os.chmod(b.image_path, 0)
    cache = open_cache(folder)
    cold = cache.cascade.levels[0]
    print(json.dumps({"entries": sorted(cold.entries), "skipped": dict(cold.skipped), "removed": dict(cold.removed),
                      "files": sorted(os.listdir(folder)), "damaged": cache.damaged,
                      "keys": {"sidecar_unreadable": a.key, "image_unreadable": b.key, "whole": whole.key},
                      "metrics": [m for m in cache.metrics_text().splitlines() if "skipped_files_total" in m]}))
    cache.close(persist=False)
    if len(sys.argv) > 2:
        made_unreadable_while_serving(folder, whole)


def made_unreadable_while_serving(folder: str, whole) -> None:
    """The whole entry's image made unreadable after the index: its restore is a miss, the files are kept."""
    from tests.cache.test_park_restore import continue_from_cache

    cache = open_cache(folder)
    os.chmod(whole.image_path, 0)
    hit, res, _, _ = continue_from_cache(cache, list(whole.tokens) + [1, 3])
    print(json.dumps({"hit": hit is not None, "restored": res.n_tokens if res else None, "damaged": cache.damaged,
                      "indexed": sorted(cache.cascade.levels[0].entries), "files": sorted(os.listdir(folder))}))
    cache.close(persist=False)


if __name__ == "__main__":
    main(sys.argv[1])
