"""A mixed step (a prompt piece read in the same forward as the other streams' next tokens) keeps to
--prefill-slice-ms at the measured prefill rate, as a prompt piece read on its own does: the streams
riding along wait for the whole step, and a deep history reads slower (the default model on two cores:
64 tokens at a 15K-token history took 720 ms, 3x the 250 ms slice, so a second agent's stream got a
token every 0.7-0.9 s while the first agent's turn was read)."""

from __future__ import annotations

import pytest
from strata.server.scheduler import MIN_PREFILL_SLICE

from tests.server.live import LiveServer
from tests.server.test_scheduling import Stream, complete, ids, monitor, wait_for


@pytest.fixture(scope="module")
def server(tiny_model_factory):
    model = tiny_model_factory(ctx_len=4096, seed=5, n_layer=6, n_embd=256, n_ff=768, n_head=4, n_head_kv=2,
                               dtype="Q8_0")
    with LiveServer(model=str(model), ctx=4096, batch=2, threads=1, conversation_cache_mib=0,
                    prefill_slice_ms=5.0, mixed_piece=64) as s:
        yield s


def test_mixed_step_pieces_keep_to_the_slice(server):
    sched = server.state.scheduler
    engine = sched.engine
    steps: list[tuple[int, int, int]] = []      # (prompt tokens, riders, slice tokens at the measured rate)

    def step(pieces, ctxs, tokens, real=engine.step):
        if ctxs and sched.prefill_rate > 0:
            held = max(MIN_PREFILL_SLICE, min(sched.chunk, int(sched.prefill_rate * sched.slice_s)))
            steps.append((sum(len(p) for _, p in pieces), len(ctxs), held))
        return real(pieces, ctxs, tokens)

    background = Stream(server.url, ids(20, 3), 3000)
    background.start()
    wait_for(lambda: monitor(server.url)["totals"]["in_flight"] == 1 and background.times)
    engine.step = step
    try:
        long = complete(server.url, ids(1200, 4), 2)
    finally:
        del engine.step
    background.leave.set()
    background.join()
    assert long["usage"]["prompt_tokens"] == 1200
    assert background.status == 200
    assert len(steps) >= 4, f"the prompt was not read in mixed steps with a stream riding along: {steps}"
    assert any(held < 64 for _, _, held in steps), f"the slice held --mixed-piece anyway: {steps}"
    assert all(n <= held for n, _, held in steps), f"a mixed step read past the slice: {steps}"
