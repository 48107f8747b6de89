"""server/cache_reuse.plan: which runs of a context's history a code completion's prompt moves into place
(--cache-reuse), on token lists shaped as the editor's requests are (fim_prompt's default order)."""

from __future__ import annotations

import pytest
from strata.server import cache_reuse
from strata.server.cache_reuse import plan

PRE, SUF, MID = 1, 2, 3
PREFIX = list(range(100, 700))     # 600 prefix tokens
SUFFIX = list(range(1000, 1510))   # the ~510 after the cursor
ANSWER = [7, 8, 9]


def prompt(prefix, typed, suffix=SUFFIX):
    return [PRE, *prefix, *typed, SUF, *suffix, MID]


def test_a_keystroke_reads_its_typed_tokens_and_moves_the_suffix():
    history = prompt(PREFIX, [40]) + ANSWER
    new = prompt(PREFIX, [40, 41, 42])
    limit = len(new) - 1
    keep = 1 + len(PREFIX) + 1                       # through the typed token they share
    p = plan(history, new, keep, 256, limit)
    assert p.pieces == ((41, 42), range(keep, keep + 1 + len(SUFFIX)))
    assert (p.moved, p.read, p.end) == (511, 2, limit)     # MID, the last token, is read as ever
    assert p.approx_from == keep + 2                  # the typed tokens are read in place: exact


def test_the_window_sliding_moves_the_rest_of_the_prefix_then_the_suffix():
    history = prompt(PREFIX, [40]) + ANSWER
    new = prompt(PREFIX[256:], [40, 41])             # the prefix's start moved by fim_prompt's PREFIX_CUT_STEP
    limit = len(new) - 1
    p = plan(history, new, 1, 256, limit)
    assert p.pieces == (range(257, 1 + len(PREFIX) + 1), (41,), range(1 + len(PREFIX) + 1, len(history) - 4))
    assert (p.read, p.end, p.approx_from) == (1, limit, 1)


def test_runs_shorter_than_n_gaps_longer_than_max_gap_and_off():
    history = prompt(PREFIX, [40]) + ANSWER
    keep = 1 + len(PREFIX) + 1
    assert plan(history, prompt(PREFIX, [40, 41], SUFFIX[:100]), keep, 256, 700) is None   # a 101-token run
    assert plan(history, prompt(PREFIX, [40, 41], SUFFIX[:100]), keep, 64, 10_000).moved == 101
    typed = [40] + list(range(2000, 2000 + cache_reuse.MAX_GAP + 1))
    new = prompt(PREFIX, typed)
    assert plan(history, new, keep, 256, len(new) - 1) is None
    new = prompt(PREFIX, typed[:-1])
    assert plan(history, new, keep, 256, len(new) - 1).read == cache_reuse.MAX_GAP
    assert plan(history, prompt(PREFIX, [40, 41]), keep, 0, 2000) is None


def test_runs_come_in_history_order_and_stop_at_the_limit():
    a, b = list(range(3000, 3300)), list(range(4000, 4300))
    history = [PRE, *a, *b]
    new = [PRE, *b, *a, MID]                         # b first: a, before it in the history, cannot follow
    p = plan(history, new, 1, 256, len(new) - 1)
    assert p.pieces == (range(301, 601),) and p.end == 301
    new = [PRE, *a, 5]
    p = plan([PRE, 9, *a, 6], new, 1, 256, len(new) - 1)
    assert p.pieces == (range(2, 302),) and p.end == len(new) - 1


def test_of_two_runs_at_the_same_prompt_position_the_earliest_in_the_history_is_taken():
    """f7837fe's choice (llama.cpp's): the first run of at least N found, in history order, not the longest (which
    meant comparing every candidate to its end: 266 ms on a repetitive 7,200-token history). Here the earlier copy
    of r ends at Z, the later one goes on into s: the earlier is moved, s is left to the normal read."""
    r, s = list(range(3000, 3300)), list(range(4000, 4050))
    history = [PRE, 5, *r, 6, *r, *s]
    new = [PRE, *r, *s, MID]
    p = plan(history, new, 1, 256, len(new) - 1)
    assert p.pieces == (range(2, 302),) and (p.moved, p.read, p.end) == (300, 0, 301)


def test_a_repetitive_history_stops_the_search_at_the_comparison_budget():
    """Indentation-like history: every position of the gap has thousands of anchor matches that break off before
    N tokens (a plan over 7,000 such tokens took 37 ms on the scheduler's thread; it grew with the matches). The
    search settles for what it found once `max_compares` is spent; with room it finds the real run at the end.
    Runs of one token 200 long (blank lines) made an unbounded plan compare for 2.6 s (2,000 tokens) to 6.9 s (6,000)."""
    pattern = [5, 5, 5, 5, 5, 5, 5, 5, 6]
    run = list(range(3000, 3300))
    history = [PRE] + pattern * 3000 + run
    new = [PRE, *pattern[:8], *run, MID]             # the anchor 5*8 matches ~3,000 places, each breaking at 6
    limit = len(new) - 1
    assert plan(history, new, 1, 256, limit, max_compares=1_000) is None
    found = plan(history, new, 1, 256, limit)        # ~3,000 comparisons: within the default budget
    assert found.pieces[-1] == range(len(history) - len(run), len(history)) and found.moved == len(run)


def test_the_comparison_budget_must_be_positive():
    with pytest.raises(ValueError, match="max_compares must be > 0, got 0"):
        plan([PRE, 1, 2], [PRE, 1, 2, MID], 1, 256, 3, max_compares=0)


def test_long_partial_matches_are_bounded_too():
    history = [PRE] + ([5] * 200 + [6]) * 10           # every anchor of the prompt matches ~2,000 places, ~200 long
    new = [PRE] + [5] * 250 + [7, MID]
    calls = []

    class Counted(list):
        def __getitem__(self, i):
            calls.append(1)
            return super().__getitem__(i)

    assert plan(Counted(history), new, 1, 256, len(new) - 1) is None
    assert len(calls) < 2 * cache_reuse.MAX_COMPARES    # before: ~6 million history reads
