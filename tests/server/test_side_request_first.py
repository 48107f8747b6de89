"""A short request that arrives while a long prompt is read has its prompt read first (--prompt-order
shortest-first): in the step that reads it, whole, the long prompt gets only what is left of the time slice.
Read in round robin, the long prompt took --prefill-chunk / 2 tokens in that step, and the short request's
first token waited for them (a new-user trial: an agent's 46-token title request took 2.9-14.3 s beside a
7.8K-token turn on two cores, its first token up to 9.5 s)."""

from __future__ import annotations

import pytest
from strata.server.scheduler import SOLO_PIECE_MIN

from tests.server.live import LiveServer
from tests.server.side_request import side_beside_long
from tests.server.test_scheduling import complete, ids

LONG, SIDE, CHUNK = 1500, 12, 256


def served(tiny_model_factory, order: str):
    model = tiny_model_factory(ctx_len=4096, seed=5, n_layer=6, n_embd=256, n_ff=768, n_head=4, n_head_kv=2,
                               dtype="Q8_0")
    return LiveServer(model=str(model), ctx=4096, batch=2, threads=1, conversation_cache_mib=0,
                      prefill_chunk=CHUNK, prefill_slice_ms=5.0, mixed_piece=64, prompt_order=order)


def steps_beside_a_long_prompt(server) -> tuple[list[list[tuple[int, int]]], int, int]:
    """The pieces ((context, tokens) in the order read) of each mixed step while a short request is read beside a
    long one, its context, and the slice at the measured rate when it was read. The long prompt's solo piece waits
    for the short request to be queued, so it always comes while the long prompt is read."""
    sched = server.state.scheduler
    steps: list[list[tuple[int, int]]] = []
    slices: list[int] = []

    def step(pieces, ctxs, tokens, real=sched.engine.step):
        steps.append([(ctx, len(p)) for ctx, p in pieces])
        slices.append(sched._slice_at_rate())
        return real(pieces, ctxs, tokens)

    answers = side_beside_long(server, LONG, SIDE, 2, {"step": step})
    assert answers["long"]["usage"]["prompt_tokens"] == LONG and answers["side"]["usage"]["prompt_tokens"] == SIDE
    side_ctx = next(ctx for pieces in steps for ctx, n in pieces if n <= SIDE)
    first = next(i for i, pieces in enumerate(steps) if any(ctx == side_ctx for ctx, _ in pieces))
    return steps[first:], side_ctx, slices[first]


@pytest.mark.parametrize("order", ["shortest-first"])
def test_the_short_prompt_is_read_first_and_whole(tiny_model_factory, order):
    with served(tiny_model_factory, order) as server:
        steps, side_ctx, slice_tokens = steps_beside_a_long_prompt(server)
    pieces = steps[0]
    assert pieces[0] == (side_ctx, SIDE), f"the short prompt was not read first and whole: {steps[:3]}"
    long_read = sum(n for ctx, n in pieces if ctx != side_ctx)
    assert long_read <= max(0, slice_tokens - SIDE), \
        f"the long prompt took {long_read} tokens in the short one's step (slice {slice_tokens}): {steps[:3]}"


def test_round_robin_reads_the_long_prompts_piece_beside_it(tiny_model_factory):
    """--prompt-order round-robin keeps the order before shortest-first: the long prompt's piece in the same step."""
    with served(tiny_model_factory, "round-robin") as server:
        steps, side_ctx, _ = steps_beside_a_long_prompt(server)
    assert sum(n for ctx, n in steps[0] if ctx != side_ctx) == CHUNK // 2, steps[:3]


@pytest.mark.parametrize("solo_slice_ms, beside", [(20.0, True), (20.0, False), (0.0, True), (0.0, False)])
def test_a_prompt_read_alone_goes_in_solo_slices(tiny_model_factory, solo_slice_ms, beside):
    """A prompt read alone goes in pieces of about --solo-slice-ms at the measured rate (SOLO_PIECE_MIN tokens at
    least), so a request arriving meanwhile waits about that long to start, not a whole --prefill-chunk piece: also
    before any request came beside another (the first side request after a quiet spell; before, only within 120 s of
    one, and it waited a whole piece: 5-9 s at a 7K-token history on two loaded cores). 0: whole chunks."""
    model = tiny_model_factory(ctx_len=4096, seed=5, n_layer=6, n_embd=256, n_ff=768, n_head=4, n_head_kv=2,
                               dtype="Q8_0")
    with LiveServer(model=str(model), ctx=4096, batch=2, threads=1, conversation_cache_mib=0, prefill_chunk=512,
                    solo_slice_ms=solo_slice_ms) as server:
        sched = server.state.scheduler
        engine = sched.engine
        if beside:
            steps_beside_a_long_prompt(server)
        else:
            complete(server.url, ids(300, 3), 1)          # the prefill rate measured, nothing beside another
        assert sched.prefill_rate > 0
        pieces: list[int] = []

        def prefill(ctx, part, chunk=None, real=engine.prefill):
            pieces.append(len(part))
            return real(ctx, part, chunk=chunk) if chunk is not None else real(ctx, part)

        engine.prefill = prefill
        try:
            complete(server.url, ids(2000, 9), 1)
        finally:
            del engine.prefill
    if solo_slice_ms:
        assert len(pieces) > 2000 // 512 + 1 and max(pieces) < 512, pieces
        assert min(pieces[:-1]) >= SOLO_PIECE_MIN, pieces
    else:
        assert pieces[:3] == [512, 512, 512], pieces
