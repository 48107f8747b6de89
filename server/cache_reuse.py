"""llama.cpp's `--cache-reuse N` for code completions: past the part of a prompt a context's history starts with,
the runs of at least N tokens of that history that come next in the prompt, to be moved into place (their keys
re-rotated: Engine.splice) instead of read again.

llama.cpp looks, after the common prefix, for a run of the cached history that comes next in the prompt, drops
the cells before it and shifts it down. Here the prompt may also have a few new tokens before a run (`max_gap`):
an editor's keystroke adds its typed tokens at the cursor, and in the default fill-in-the-middle order the ~510
suffix tokens after the cursor follow them; llama.cpp's rule finds no run there and reads the suffix again at
every keystroke. The gap's tokens are read in place by the splice (they attend to what precedes them only, as in
a fresh read). When the editor's window slides (the prefix's start moves by PREFIX_CUT_STEP), the rest of the
prefix, the typed part and the suffix come next as two runs with the typed tokens between.

The moved cells' keys and values were computed beside tokens that are gone: from the first moved cell on, the
context holds an approximation of a fresh read. Only code completions take it (llama.cpp accepts it there); an
exact request never matches such a context past that point (slots.ContextState.approx_from).

Policy only, pure: the scheduler's row_start applies the plan.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

# tokens of new prompt text a plan reads between two runs (Engine.splice reads them in one engine call, outside
# the scheduler's time slices): a keystroke's typed tokens are a few; a run further on is left to the normal read
MAX_GAP = 64
# tokens that must agree to look a run up (the history indexed by its ANCHOR-grams; at most N)
ANCHOR = 8
# token comparisons a plan may make (~15 ms of Python) before it settles for the runs found (the rest is read): on a
# repetitive history (runs of blank-line or indentation tokens) every position of a gap has thousands of anchor
# matches that go on for a while before breaking off short of N tokens; unbounded, such a 2,000-token history took
# 2.6 s and a 6,000-token one 6.9 s on the scheduler's thread (every other request waiting)
MAX_COMPARES = 50_000


@dataclass(frozen=True)
class ReusePlan:
    """Engine.splice's arguments and what they do: `pieces` laid out from `keep`, a range a run of the history
    moved, a tuple new prompt tokens read."""

    keep: int
    pieces: tuple[range | tuple[int, ...], ...]
    moved: int          # history tokens moved into place (reused)
    read: int           # new tokens the splice reads between runs
    approx_from: int    # the first moved cell's new position: from there on the KV is approximate

    @property
    def end(self) -> int:
        """Prompt tokens the context holds after the splice."""
        return self.keep + self.moved + self.read


def plan(history: list[int], prompt: list[int], keep: int, min_run: int, limit: int,
         max_gap: int = MAX_GAP, max_compares: int = MAX_COMPARES) -> ReusePlan | None:
    """The runs of `history` past `keep` (which the context keeps: the prompt starts with history[:keep]) of at
    least `min_run` tokens that come next in `prompt[:limit]`, in order, each after at most `max_gap` new tokens;
    the earliest in the history where several start at the first prompt position that has one. None when there is none (or
    min_run is 0). The search ends with the runs found so far after `max_compares` token comparisons (the rest is
    read as usual)."""
    if min_run <= 0 or keep >= limit:
        return None
    if max_compares <= 0:
        raise ValueError(f"max_compares must be > 0, got {max_compares!r}")
    compares = 0
    k = min(ANCHOR, min_run)
    at: dict[tuple[int, ...], list[int]] = {}
    for c in range(keep, len(history) - k + 1):
        at.setdefault(tuple(history[c: c + k]), []).append(c)
    pieces: list[range | tuple[int, ...]] = []
    head_c = head_p = keep
    moved = read = 0
    approx_from = -1
    while head_p < limit:
        best = None          # (prompt position, history position, run length)
        for p in range(head_p, min(head_p + max_gap, limit - k) + 1):
            starts = at.get(tuple(prompt[p: p + k]), [])
            for c in starts[bisect.bisect_left(starts, head_c):]:      # in history order: none before head_c
                m = k
                while p + m < limit and c + m < len(history) and history[c + m] == prompt[p + m]:
                    m += 1
                compares += m - k + 1
                if m >= min_run:   # the earliest in the history, as llama.cpp takes it (and the work stays bounded)
                    best = (p, c, m)
                    break
                if compares > max_compares:
                    break
            if best is not None or compares > max_compares:
                break
        if best is None:
            break
        p, c, m = best
        if p > head_p:
            pieces.append(tuple(prompt[head_p:p]))
            read += p - head_p
        if approx_from < 0:
            approx_from = p
        pieces.append(range(c, c + m))
        moved += m
        head_p, head_c = p + m, c + m
    if moved == 0:
        return None
    return ReusePlan(keep=keep, pieces=tuple(pieces), moved=moved, read=read, approx_from=approx_from)
