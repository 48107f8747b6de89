"""Which prompt pieces one mixed step reads, in what order (the policy; Scheduler._mixed_step applies it).

An agent's side request (a title, a summary: tens to a few thousand prompt tokens) often arrives while its
main conversation's long turn (6-8K tokens) is read in another slot. Read in round robin with no stream
riding along, each step gave the long prompt a piece of --prefill-chunk / 2 tokens, so the side request's
first token waited for 256 tokens at a 7K-token history (~3 s on two cores; a new-user trial, 2026-12-06).

`shortest-first` (the default): the prompt with the fewest tokens left is read first, up to its piece; the
others then share what is left of the time slice (--prefill-slice-ms at the measured rate), none when the
first piece filled it. A short prompt therefore gets its first token one slice after it is placed, and a
long one waits only while shorter ones are read (each is bounded: it is shorter). Ties keep the round robin.
`round-robin`: every prompt in turn gets its piece, as before.

Shortest-first alone starves a long prompt while shorter ones keep coming: in session 32's agent soak, five agents
beside one another, a Codex turn of 8,128 tokens sat at 353 read for 5 minutes and waited 592 s for its first
token. A prompt a step passed over (MAX_PASSED_OVER steps in a row) therefore goes first in the next, those passed
over longest first: the long one gets at least every other step's piece, and a side request waits at most one
more slice.
"""

from __future__ import annotations

from collections.abc import Sequence

ORDERS = ("shortest-first", "round-robin")
# mixed steps in a row that may read none of a prompt under shortest-first before it goes first
MAX_PASSED_OVER = 1


def check_order(order: str) -> str:
    if order not in ORDERS:
        raise ValueError(f"prompt order {order!r} is not one of {', '.join(ORDERS)}")
    return order


def plan(left: Sequence[int], caps: Sequence[int], start: int, *, order: str, budget: int,
         slice_tokens: int, passed_over: Sequence[int] = (),
         max_passed_over: int = MAX_PASSED_OVER) -> list[tuple[int, int]]:
    """(index, tokens) of each prompt piece one step reads, in the order read. `left[i]`: tokens prompt i has
    still to read; `caps[i]`: the most its piece may take (--mixed-piece, or a completion's time bound);
    `start`: whose turn it is (the round robin); `budget`: the most the step reads in all; `slice_tokens`: what
    the time slice holds at the measured prefill rate (shortest-first keeps the pieces after the first to it);
    `passed_over[i]`: the steps in a row that read none of prompt i (none given: 0), which under shortest-first
    put it first from `max_passed_over` on."""
    check_order(order)
    if budget < 0 or slice_tokens < 0:
        raise ValueError(f"a step's budget ({budget}) and slice ({slice_tokens}) cannot be negative")
    if max_passed_over < 1:
        raise ValueError(f"max_passed_over must be at least 1 (0 would put every prompt first), got {max_passed_over}")
    n = len(left)
    waits = list(passed_over) or [0] * n
    if len(waits) != n:
        raise ValueError(f"passed_over has {len(waits)} counts for {n} prompts")
    turn = [(start + k) % n for k in range(n)] if n else []
    if order == "shortest-first":
        live = [i for i in turn if left[i] > 0]
        overdue = sorted((i for i in live if waits[i] >= max_passed_over), key=lambda i: -waits[i])   # stable
        turn = overdue + sorted((i for i in live if waits[i] < max_passed_over), key=lambda i: left[i])
    out: list[tuple[int, int]] = []
    for i in turn:
        if out and order == "shortest-first":     # after the shortest one's piece: what is left of the slice
            budget = min(budget, max(0, slice_tokens - sum(k for _, k in out)))
        take = min(caps[i], budget, left[i])
        if take > 0:
            out.append((i, take))
            budget -= take
    return out
