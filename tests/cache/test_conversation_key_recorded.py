"""A parked history keeps the conversation key its requests ran under (the entry's meta, its sidecar on disk), so a
session save by that key finds it in the cache (`conversation_holders`); a sidecar written before keys were
recorded has none, still loads and is found by its tokens. Real files, the simulated engine."""

from __future__ import annotations

import json
import os

from tests.cache.conftest import history


def _cold_only(make_cache):
    return make_cache(conversation_cache_mib=0, conversation_cache_park="disk", conversation_cache_cold_mib=8)


def _sidecar(folder) -> str:
    (name,) = [n for n in os.listdir(folder) if n.endswith(".json")]
    return os.path.join(folder, name)


def test_the_key_goes_with_the_history_to_ram_and_to_disk_and_back_after_a_restart(make_cache, folders):
    ram = make_cache()
    a, b = history(1, 50), history(2, 40)
    ram.engine.prefill(1, a)
    ram.engine.prefill(2, b)
    key_a = ram.park(1, "test", conversation="3f2a9c01b7de").key
    ram.park(2, "test")                                  # a context that ran under no key
    assert [h[:3] for h in ram.conversation_holders("3f2a9c01b7de")] == [("ram", key_a, a)]
    assert ram.conversation_holders("") == [] and ram.conversation_holders("another") == []

    cold = _cold_only(make_cache)
    cold.engine.prefill(1, a)
    key = cold.park(1, "test", conversation="3f2a9c01b7de").key
    cold.flush()
    with open(_sidecar(folders["cold"])) as f:
        assert json.load(f)["meta"]["conversation"] == "3f2a9c01b7de"
    (parked_at,) = [h[3] for h in cold.conversation_holders("3f2a9c01b7de")]
    again = _cold_only(make_cache)
    # when it was parked goes with it (which of a key's entries that went different ways is the conversation now)
    assert again.conversation_holders("3f2a9c01b7de") == [("cold", key, a, parked_at)]


def test_a_sidecar_written_before_keys_were_recorded_still_loads(make_cache, folders):
    cache = _cold_only(make_cache)
    a = history(1, 50)
    cache.engine.prefill(1, a)
    key = cache.park(1, "test", conversation="3f2a9c01b7de").key
    cache.flush()
    path = _sidecar(folders["cold"])
    with open(path) as f:
        d = json.load(f)
    del d["meta"]["conversation"]                      # as an older Strata wrote it
    with open(path, "w") as f:
        json.dump(d, f, separators=(",", ":"))
    again = _cold_only(make_cache)
    assert key in again.cascade.levels[0].entries and not any(again.cascade.levels[0].skipped.values())
    assert again.conversation_holders("3f2a9c01b7de") == []             # no key: not found by it
    assert [(lvl, k, n) for lvl, k, _, n in again.history_holders(a)] == [("cold", key, 50)]   # by its tokens
