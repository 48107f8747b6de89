"""A request generating beside a prompt being read (an agent's side request beside its long turn) gets steps of its
own between the prompt's pieces (--decode-share), and the prompt is still read all along. Before, it rode along the
prompt's pieces one token each: ~4 tokens/s beside a 7K-token turn on two cores (a 40-token title took ~10 s).
A real server and a tiny model; the engine calls are recorded, not replaced."""

from __future__ import annotations

from tests.server.live import LiveServer
from tests.server.side_request import side_beside_long

LONG, SIDE, SIDE_OUT = 3000, 12, 40


def calls_beside_a_long_prompt(tiny_model_factory, share: float) -> tuple[list[tuple[str, set[int], int]], int]:
    """The engine calls while a side request generates beside a long prompt, in order: ('step', riders, the long
    prompt's tokens read) or ('decode', rows, 0); and the side request's context."""
    model = tiny_model_factory(ctx_len=4096, seed=5, n_layer=6, n_embd=256, n_ff=768, n_head=4, n_head_kv=2,
                               dtype="Q8_0")
    with LiveServer(model=str(model), ctx=4096, batch=2, threads=1, conversation_cache_mib=0, prefill_chunk=256,
                    prefill_slice_ms=5.0, mixed_piece=64, lookup_draft=0, decode_share=share) as server:
        engine = server.state.scheduler.engine
        calls: list[tuple[str, set[int], int, int]] = []

        def step(pieces, ctxs, tokens, real=engine.step):
            calls.append(("step", set(ctxs), [(ctx, len(p)) for ctx, p in pieces]))
            return real(pieces, ctxs, tokens)

        def decode(ctxs, tokens, real=engine.decode):
            calls.append(("decode", set(ctxs), []))
            return real(ctxs, tokens)

        answers = side_beside_long(server, LONG, SIDE, SIDE_OUT, {"step": step, "decode": decode}, ignore_eos=True)
    assert answers["long"]["usage"]["prompt_tokens"] == LONG
    assert answers["side"]["usage"]["completion_tokens"] == SIDE_OUT
    side_ctx = next(ctx for kind, _, pieces in calls if kind == "step" for ctx, n in pieces if n == SIDE)
    long_ctx = next(ctx for kind, _, pieces in calls if kind == "step" for ctx, n in pieces if ctx != side_ctx)
    # from the side request's first step generating to the last step of the long prompt's read while it generated
    generating = [i for i, (_, rows, _) in enumerate(calls) if side_ctx in rows]
    reads = [i for i, (kind, _, pieces) in enumerate(calls) if kind == "step" and any(c == long_ctx for c, _ in pieces)]
    window = [(kind, side_ctx in rows, sum(n for c, n in pieces if c == long_ctx))
              for kind, rows, pieces in calls[generating[0]: max(i for i in reads if i < generating[-1]) + 1]]
    return window, side_ctx


def test_a_side_request_decodes_between_the_long_prompts_pieces(tiny_model_factory):
    window, _ = calls_beside_a_long_prompt(tiny_model_factory, 0.5)
    tokens = sum(1 for _, side, _ in window if side)
    reads = [n for kind, _, n in window if kind == "step" and n]
    assert any(kind == "decode" for kind, _, _ in window), f"no decode-only step beside the long prompt: {window}"
    assert tokens > 2 * len(reads), f"{tokens} side tokens in {len(reads)} of the long prompt's pieces: {window}"
    # the long prompt is still read while the side request generates, and its first steps after its first token
    # are its own (a decode-only step first)
    assert len(reads) >= 2, window
    assert window[0][0] == "decode", window[:3]


def test_zero_keeps_one_token_per_piece(tiny_model_factory):
    """--decode-share 0: the side request rides along the long prompt's pieces, one token each (the behaviour
    before)."""
    window, _ = calls_beside_a_long_prompt(tiny_model_factory, 0.0)
    assert all(kind == "step" and n > 0 for kind, _, n in window), window
