"""What the side-request tests share (test_side_request_first.py, test_side_request_decodes.py): a short request sent
while a long prompt is being read, on a live server, with some of its engine's calls recorded meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests.server.test_scheduling import complete, ids, wait_for


def side_beside_long(server, long_n: int, side_n: int, side_max_tokens: int, recorders: dict[str, Callable],
                     **side_kw) -> dict[str, dict]:
    """Sends a long prompt (`long_n` tokens, 2 to generate) and, once it runs, a side one (`side_n` tokens,
    `side_max_tokens`, `side_kw`), each from its thread; returns their answers ("long", "side"). The long prompt's
    solo pieces (engine.prefill) wait until the side request is queued or running, so that it always comes while
    the long prompt is read. `recorders` (engine method name -> a wrapper that records and calls the real one)
    replace those engine methods meanwhile."""
    sched = server.state.scheduler
    engine = sched.engine
    queued = threading.Event()

    def prefill(ctx, part, chunk=None, real=engine.prefill):
        out = real(ctx, part, chunk=chunk) if chunk is not None else real(ctx, part)
        queued.wait(60)
        return out

    replaced = {"prefill": prefill, **recorders}
    for name, f in replaced.items():
        setattr(engine, name, f)
    try:
        answers: dict[str, dict] = {}
        long = threading.Thread(target=lambda: answers.__setitem__("long", complete(server.url, ids(long_n, 4), 2)))
        long.start()
        wait_for(lambda: sched.in_flight == 1)
        side = threading.Thread(target=lambda: answers.__setitem__(
            "side", complete(server.url, ids(side_n, 7), side_max_tokens, **side_kw)))
        side.start()
        wait_for(lambda: sched.queue_depth == 1 or sched.in_flight == 2)
        queued.set()
        side.join(120)
        long.join(120)
    finally:
        queued.set()
        for name in replaced:
            delattr(engine, name)
    return answers
