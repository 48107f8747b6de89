"""The sessions folder is indexed once, whichever thread comes first. The first save runs on the engine's worker
thread, a first list or DELETE on the event loop's executor: both indexed it at once, and the one that finished
last replaced the index, dropping the other's new entry until a restart (a review of session 28's changes).
Real files and the simulated engine; the folder's indexing slowed for the race to show."""

from __future__ import annotations

import threading
import time

from tests.cache.conftest import history


def test_two_threads_opening_the_sessions_folder_index_it_once(make_cache):
    cache = make_cache(conversation_cache_cold_mib=64)
    store = cache.sessions
    real_open, opened = store.level.open, []

    def slow_open() -> None:               # the real indexing, slower (a folder of many sessions on a slow disk)
        opened.append(threading.current_thread().name)
        time.sleep(0.3)
        real_open()
    store.level.open = slow_open
    levels: list = []
    threads = [threading.Thread(target=lambda: levels.append(store.ensure_open()), name=f"t{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(opened) == 1, opened
    assert len(levels) == 2 and levels[0] is levels[1] is store.level
    cache.engine.prefill(1, history(1, 40))
    cache.save_session("work", 1)
    assert [x["name"] for x in cache.list_sessions()] == ["work"]
