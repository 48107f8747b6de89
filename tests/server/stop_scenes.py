"""Two scenes a stop plays with a client, shared by the API refusal tests (test_openai_refusals.py,
test_anthropic_refusals.py): a live tiny server on the main context alone, its worker held so that requests wait.

`refusals_around_a_stop(model, refuse)`: with --queue 0, one request waits (queued), a second is refused by the
full queue (full), the stop comes and refuses the queued one, then one more arrives (late). `refuse()` makes one
request and returns what its client raised; returns {"full", "queued", "late"} (queued missing if it raised
nothing).

`stream_cut_by_a_stop(model, read)`: `read(server, seen)` streams a long answer (end-of-turn tokens do not end it) and sets `seen` at its first text; the
worker is held once the client has text (a fixed two turns failed in CI: the sampled first tokens may write no text
yet), the stop comes, then the worker goes on and the stop cuts the stream."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests.server.live import LiveServer
from tests.server.test_cancelled_counts import hold_worker, hold_worker_when, wait_for


def refusals_around_a_stop(model: str, refuse: Callable[[LiveServer], object]) -> dict[str, object]:
    with LiveServer(model=model, ctx=2048, batch=0, threads=1, queue=0, conversation_cache_mib=0) as s:
        sched = s.state.scheduler
        held, release = hold_worker(sched, 0)
        assert held.wait(60)
        got: dict[str, object] = {}
        queued = threading.Thread(target=lambda: got.update(queued=refuse(s)))
        queued.start()
        wait_for(lambda: sched.queue_depth == 1)
        got["full"] = refuse(s)                    # --queue 0 and one waiting
        stopping = threading.Thread(target=sched.stop)
        stopping.start()
        wait_for(lambda: sched.stopping)
        release.set()                              # the worker ends its turn and stops: the queued one is refused
        stopping.join(60)
        queued.join(60)
        got["late"] = refuse(s)                    # submitted once the stop began
    return got


def stream_cut_by_a_stop(model: str, read: Callable[[LiveServer, threading.Event], None]) -> None:
    with LiveServer(model=model, ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        sched = s.state.scheduler
        sched.eos.clear()      # the answer never ends by itself: a sampled end-of-turn in the first tokens (the
        #                        Anthropic API has no seed) ended it before the stop, and nothing was cut
        held, release = hold_worker(sched, 0)
        assert held.wait(60)
        seen = threading.Event()
        streaming = threading.Thread(target=read, args=(s, seen))
        streaming.start()
        wait_for(lambda: sched.queue_depth == 1)
        held2, release2 = hold_worker_when(sched, seen.is_set)   # the stream starts, then held again once its
        release.set()                                              # client has text (not after a fixed number of
        assert held2.wait(60), "no text in 60 s: the stream never began"   # turns: its first tokens may write none)
        stopping = threading.Thread(target=sched.stop)
        stopping.start()
        wait_for(lambda: sched.stopping)
        release2.set()
        stopping.join(60)
        streaming.join(60)
