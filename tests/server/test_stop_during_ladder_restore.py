"""A damaged entry's valid prefix restored for a request while a stop begins is kept by the stop.

row_start marked the context a restore ran into as parked when the server was stopping ("a prefix of the entry it
came from, which stays: the stop keeps no copy of it"). But a disk entry damaged past its start restores its valid
prefix (the restore ladder) and is deleted as damaged: the prefix was the conversation's only copy, and the stop,
skipping a parked context, lost it (the same fault 2cc4b27 fixed in a session save's read-back).

Real server, tiny model, main only, cold level only: A is parked to cold by Q, its image flipped at 3/4; A + more
restores A's valid prefix into main. The stop is made to begin as that restore returns (the one injected step: the
cache's own restore, then the server's own stop started from another thread, the restore's caller let go once the
scheduler is stopping), then a second server on the same folder is asked for A + more."""

from __future__ import annotations

import random
import threading
import time

import httpx2 as httpx

from tests.server.live import LiveServer, cold_only, complete, flip_at_three_quarters

A_N = 1800
DEADLINE_S = 120.0


def test_a_ladder_restore_as_the_stop_begins_is_kept_by_the_stop(tiny_model, tmp_path):
    rng = random.Random(22)
    words = lambda n: [rng.randrange(10, 500) for _ in range(n)]   # noqa: E731
    a, q = [11] + words(A_N - 1), [12] + words(300)
    flags = cold_only(tiny_model, tmp_path)
    s = LiveServer(**flags).start()
    stopping: list[threading.Thread] = []
    try:
        complete(s.url, a)
        complete(s.url, q)                              # parks A to cold
        sched, cache = s.state.scheduler, s.state.scheduler.cache
        cache.flush()
        cold = cache.cascade.levels[-1]
        (entry,) = [e for e in cold.entries.values() if list(e.tokens[:A_N]) == a]
        flip_at_three_quarters(entry.image_path)
        restored: list = []
        real_restore = cache.restore

        def restore_then_the_stop_begins(hit, ctx, stop=None, **kw):
            result = real_restore(hit, ctx, stop=stop, **kw)
            restored.append(result)
            t = threading.Thread(target=s.stop, name="the stop")
            t.start()
            stopping.append(t)                          # once started: the test's thread joins it when it is seen
            deadline = time.monotonic() + DEADLINE_S
            while not sched.stopping:                   # the stop has begun: the caller sees it
                assert time.monotonic() < deadline, "the stop never began"
                time.sleep(0.01)
            return result

        cache.restore = restore_then_the_stop_begins

        def ask() -> None:
            try:
                httpx.post(s.url + "/v1/completions", json={"model": "m", "prompt": a + words(50), "max_tokens": 1,
                                                              "temperature": 0}, timeout=DEADLINE_S)
            except httpx.HTTPError:
                pass                                    # the server stopped under it: its answer is not the point

        asking = threading.Thread(target=ask)
        asking.start()
        deadline = time.monotonic() + DEADLINE_S
        while not stopping:
            assert time.monotonic() < deadline and asking.is_alive(), "no restore was made"
            time.sleep(0.01)
        stopping[0].join(DEADLINE_S)
        asking.join(DEADLINE_S)
        assert not stopping[0].is_alive()
    finally:
        if not stopping:
            s.stop()
    (result,) = restored
    assert result.ladder and 0 < result.n_tokens < A_N, result   # the valid prefix, its entry deleted as damaged
    with LiveServer(**flags) as again:
        usage = complete(again.url, a + words(50))
    # before: marked parked, the stop skipped it and the damaged entry was deleted: cached 0
    assert usage["prompt_tokens_details"]["cached_tokens"] >= result.n_tokens - 1, usage
