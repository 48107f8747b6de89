"""A park whose engine call the stop gave up as stuck, ending after the conversation cache closed: the worker
goes on from where it was (its history's state copied, the request it made room for started) and the park handed
its capture to a closed cache: to the spill writer, which then started again and wrote files into the disk level
after the stop had said what it kept (while the process exited: a writer killed mid-way). It is not taken now,
nor counted. A live tiny server; the worker is held inside the real Engine.snapshot_chunks of that park."""

from __future__ import annotations

import threading
import time

from strata.server import stop_progress

from tests.server.live import LiveServer
from tests.server.sched_stress import Pause
from tests.server.test_cache_and_policy import complete, ids


def test_a_park_ending_after_the_cache_closed_writes_and_counts_nothing(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setattr(stop_progress, "STEP_WAIT_SLACK_S", 0.3)
    warm = tmp_path / "warm"
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0,
                    conversation_cache_min_free_mib=0, conversation_cache_park_min_free_mib=0,
                    conversation_cache_warm_dir=str(warm), conversation_cache_warm_mib=64) as s:
        sched, cache = s.state.scheduler, s.state.cache
        complete(s.url, ids(300, 71))                        # main holds it; the next conversation parks it
        with Pause(sched.engine, "snapshot_chunks") as pause:
            threading.Thread(target=lambda: _try(s.url, ids(200, 72)), daemon=True).start()
            assert pause.entered.wait(60)
            sched.stop(every_s=0.2)                          # gives the held park up as stuck
            cache.close()                                    # as the server's cleanup does next
            parks, files = dict(cache.parks), sorted(p.name for p in warm.iterdir())
            pause.release.set()
            sched._thread.join(60)
            assert not sched._thread.is_alive()
            time.sleep(0.5)                                  # a spill writer started again would write by now
            assert sorted(p.name for p in warm.iterdir()) == files
            assert dict(cache.parks) == parks
            assert not cache._pending


def _try(url: str, prompt: list[int]) -> None:
    try:
        complete(url, prompt)
    except Exception:   # the stop ends it: a 503 (AssertionError), or its connection closed (httpx's errors)
        pass
