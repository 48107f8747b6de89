"""What the cache shows: the INFO-line fragment, the monitor feed's `cache` object, /metrics."""

from __future__ import annotations

from strata.server.cache.memory import FixedMemory

from tests.cache.conftest import history, park_history


def test_describe_names_every_level_folder_budget_and_state(make_cache, folders):
    cache = make_cache(conversation_cache_mib=64, conversation_cache_warm_mib=128, conversation_cache_cold_mib=256,
                       conversation_cache_system_prompt_mib=32)
    line = cache.describe()
    assert line.startswith("conversation cache: park target ram")
    for needle in ("ram 64 MiB on", f"warm {folders['warm']} 128 MiB on", f"cold {folders['cold']} 256 MiB on",
                   "segment off", f"system-prompt cache {folders['system']} 32 MiB on"):
        assert needle in line, line
    off = make_cache(conversation_cache_mib=0)
    assert "ram off; warm off; cold off" in off.describe()


def test_monitor_snapshot_fields(make_cache, clock):
    mem = FixedMemory(100_000)
    cache = make_cache(memory=mem, conversation_cache_mib=1, conversation_cache_cold_mib=100)
    park_history(cache, history(1))
    clock.t += 1
    park_history(cache, history(2))  # history(1) degrades to cold
    mem.value = 2000
    park_history(cache, history(3))  # spills under the transient floor
    cache.flush()
    snap = cache.snapshot_for_monitor()
    assert snap["park_target"] == "ram"
    assert snap["parks"] == {"ram": 2, "disk": 1, "discard": 0}
    assert set(snap["hits"]) == {"ram", "warm", "cold", "segment", "system_prompt"}
    adm = snap["admission"]
    assert adm["available_mib"] == 2000 and adm["min_free_mib"] == 2560 and adm["park_min_free_mib"] == 512
    assert adm["last"][-1]["floor"] == "transient" and adm["last"][-1]["source"] == "park"
    levels = {row["name"]: row for row in snap["levels"]}
    assert levels["warm"]["state"] == "off" and "entries" not in levels["warm"]  # absent, not a fake 0
    assert levels["cold"]["entries"] == 2 and levels["ram"]["degradations"] == 1
    assert levels["cold"]["evictions"] == 0 and levels["cold"]["age_evictions"] == 0
    assert "entries" not in snap["system_prompt_cache"]
    assert snap["segment_tier"]["budget_mib"] == 0 and "entries" not in snap["segment_tier"]


def test_metrics_text(make_cache, clock):
    cache = make_cache(conversation_cache_mib=1, conversation_cache_cold_mib=100)
    park_history(cache, history(1))
    clock.t += 1
    park_history(cache, history(2))
    hit = cache.lookup(history(1) + [1])
    cache.restore(hit, 2)
    text = cache.metrics_text()
    for line in ('strata_cache_parks_total{destination="ram"} 2', 'strata_cache_hits_total{level="cold"} 1',
                 'strata_cache_degradations_total{level="ram"} 1', 'strata_cache_level_entries{level="cold"} 1',
                 'strata_cache_admissions_total{floor="parking",source="disk_hit"} 1',
                 'strata_cache_evictions_total{level="cold"} 0'):
        assert line in text, text
    assert 'strata_cache_restore_seconds_last{level="cold"}' in text
    assert 'strata_cache_restore_seconds_count{level="cold"} 1' in text


def test_metrics_and_monitor_read_while_the_cache_changes(make_cache):
    """/metrics and the monitor feed read the cache on the event loop, unlocked, while the engine thread
    parks and restores: they iterated the levels' live dicts and the restore deque, and a scrape failed
    ('dictionary changed size during iteration', after 261 scrapes here) and lost every cache line. Threads
    switch every microsecond here so that a change lands inside an iteration."""
    import sys
    import threading

    from .test_park_restore import continue_from_cache

    cache = make_cache(conversation_cache_mib=4, conversation_cache_cold_mib=0)
    stop = threading.Event()
    changes = [0]

    def engine_thread():
        seed = 0
        while not stop.is_set():
            seed += 1
            h = history(100 + seed % 50)
            park_history(cache, h)                      # RAM adds, evictions, supersedes
            continue_from_cache(cache, h + [1, 300])    # a restore appends to restore_seconds
            changes[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    t = threading.Thread(target=engine_thread, daemon=True)
    t.start()
    try:
        for _ in range(3000):
            cache.metrics_text()
            cache.snapshot_for_monitor()
    finally:
        stop.set()
        t.join(60)
        sys.setswitchinterval(old)
    assert changes[0] > 10      # the cache really changed meanwhile
