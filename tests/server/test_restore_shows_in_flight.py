"""A request whose context is being restored from the conversation cache is in flight: /metrics'
strata_requests_in_flight and strata_slots_busy, the monitor's totals and its context's state say so.
The restore runs in the scheduler's worker after the request has left the queue and before its row
exists: a restore of seconds (a long history from disk) showed 0 queued, 0 in flight and the context
'idle' (even an empty one) while the request waited on it. Real server on loopback; the real restore
runs, a probe around it reads the server's own endpoints while it is under way. The context's speeds
were the previous request's meanwhile, shown as the live ones of a context in 'prefill'."""

from __future__ import annotations

import httpx2 as httpx

from tests.server.live import LiveServer
from tests.server.test_metrics import scrape


def test_a_request_restoring_from_the_cache_counts_as_running(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=2048, batch=2, slot_ctx=1024, threads=1,
                    conversation_cache_mib=64) as s:
        cache, seen = s.state.cache, []
        real_restore = cache.restore

        def probe(hit, ctx, **kwargs):     # on the worker thread, as the restore begins
            m = scrape(s.url)
            mon = httpx.get(s.url + "/v1/monitor").json()
            seen.append((ctx, m["strata_requests_in_flight"], m["strata_queue_depth"], m["strata_slots_busy"],
                         mon["totals"]["in_flight"], [x["state"] for x in mon["slots"]], mon["slots"][ctx]))
            return real_restore(hit, ctx, **kwargs)

        cache.restore = probe
        first = {"prompt": "the first conversation, parked and restored " * 8, "max_tokens": 2, "temperature": 0}
        other = {"prompt": "another conversation takes the main context " * 8, "max_tokens": 2, "temperature": 0}
        for body in (first, other, first):       # the second displaces the first into the cache; the third restores it
            r = httpx.post(s.url + "/v1/completions", json=body, timeout=60).json()
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] > 0 and seen, seen
        ctx, in_flight, queued, busy_slots, feed_in_flight, states, context = seen[-1]
        assert (in_flight, queued, feed_in_flight) == (1, 0, 1), seen
        label = "main" if ctx == 0 else ctx
        assert states[[0, 1, 2].index(ctx)] == "prefill", (label, states)
        assert busy_slots == (0 if ctx == 0 else 1)
        # its speeds are the running request's, none yet: not the previous request's shown as live
        assert "prefill_tps" not in context and "decode_tps" not in context, context
