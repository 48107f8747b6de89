"""Lookup decoding's pure rules (server/lookup.py): where a draft comes from, how long it is, and how
a row's drafts are sized and paused from how the last ones fared.

Not here: the scheduler applying them to a live model (test_lookup_decoding.py).
"""

from __future__ import annotations

import pytest
from strata.server.lookup import (
    FIRST_DRAFT,
    MAX_PAUSE_STEPS,
    DraftState,
    LookupConfig,
    TokenHistory,
    after_step,
    draft_size,
)

CFG = LookupConfig()


def test_the_tokens_after_the_latest_earlier_occurrence_of_the_suffix():
    #            0  1  2  3  4  5  6  7  8  9 10 11 12
    tokens = [5, 1, 2, 9, 9, 1, 2, 7, 8, 6, 0, 1, 2]
    # suffix (1, 2) occurred at 1 and 5; the latest is 5, followed by 7, 8, 6, ...
    assert TokenHistory(tokens).find_draft(CFG, 3) == [7, 8, 6]
    assert TokenHistory(tokens).find_draft(CFG, 100) == [7, 8, 6, 0, 1, 2]   # up to the end


def test_the_longest_suffix_wins_over_a_later_shorter_match():
    # (3, 1, 2) occurred at 0 (then 40); (1, 2) alone also at 5 (then 50), later
    tokens = [3, 1, 2, 40, 41, 1, 2, 50, 51, 3, 1, 2]
    assert TokenHistory(tokens).find_draft(CFG, 2) == [40, 41]


def test_no_draft_below_the_shortest_ngram_or_without_a_repeat():
    assert TokenHistory([1, 2, 3, 4, 5, 6]).find_draft(CFG, 4) == []
    assert TokenHistory([7, 1, 8, 1]).find_draft(CFG, 4) == []              # one token is not enough
    assert TokenHistory([7, 1, 8, 1]).find_draft(LookupConfig(min_ngram=1), 4) == [8, 1]
    assert TokenHistory([4]).find_draft(CFG, 4) == []
    assert TokenHistory([]).find_draft(CFG, 4) == []


def test_a_repeating_run_continues_itself():
    assert TokenHistory([9, 4, 4, 4, 4]).find_draft(CFG, 3) == [4]          # (4, 4, 4) at 1: then 4


def test_history_grows_past_its_buffer():
    h = TokenHistory([1, 2, 3])
    h.extend(list(range(10, 200)))
    h.extend([1, 2])
    assert len(h) == 195
    assert h.find_draft(CFG, 2) == [3, 10]


def test_draft_size_honours_pause_limit_and_room():
    assert draft_size(DraftState(), CFG, 100) == FIRST_DRAFT
    assert draft_size(DraftState(size=16), CFG, 100) == CFG.max_draft
    assert draft_size(DraftState(size=8), CFG, 3) == 3
    assert draft_size(DraftState(size=8), CFG, -1) == 0
    assert draft_size(DraftState(pause=1), CFG, 100) == 0
    assert draft_size(DraftState(), LookupConfig(max_draft=0), 100) == 0


def test_a_full_match_doubles_a_partial_sizes_to_what_was_taken():
    assert after_step(DraftState(size=4), 4, 4, CFG) == DraftState(size=8)
    assert after_step(DraftState(size=8), 8, 8, CFG) == DraftState(size=8)   # capped at max_draft
    assert after_step(DraftState(size=8), 8, 2, CFG) == DraftState(size=3)
    assert after_step(DraftState(size=8, misses=3), 8, 1, CFG) == DraftState(size=2)


def test_misses_halve_the_draft_and_pause_the_row_longer_each_time():
    s = DraftState(size=8)
    pauses = []
    for _ in range(8):
        s = after_step(s, 2, 0, CFG)
        pauses.append(s.pause)
    assert pauses == [1, 2, 4, 8, 16, 32, 32, 32]
    assert s.size == 1 and MAX_PAUSE_STEPS == 32
    # a paused row's plain steps count the pause down, then it tries again
    s = DraftState(size=2, pause=2, misses=2)
    s = after_step(s, 0, 0, CFG)
    assert s == DraftState(size=2, pause=1, misses=2)
    s = after_step(s, 0, 0, CFG)
    assert draft_size(s, CFG, 100) == 2
    assert after_step(s, 0, 0, CFG) == s == DraftState(size=2, pause=0, misses=2)   # nothing left to count


@pytest.mark.parametrize("kwargs, word", [
    ({"max_draft": -1}, "max_draft"), ({"max_draft": 32}, "max_draft"),
    ({"min_ngram": 0}, "min_ngram=0"), ({"min_ngram": 5, "max_ngram": 4}, "min_ngram=5"),
    ({"max_rows": 0}, "max_rows"),
])
def test_invalid_settings_are_refused_by_name(kwargs, word):
    with pytest.raises(ValueError, match=word):
        LookupConfig(**kwargs)


def _scanned_draft(tokens: list[int], cfg: LookupConfig, size: int) -> list[int]:
    """The draft by its definition: every start of every n-gram length compared, longest first."""
    n = len(tokens)
    for k in range(min(cfg.max_ngram, n - 1), cfg.min_ngram - 1, -1):
        hits = [p for p in range(n - k) if tokens[p: p + k] == tokens[n - k:]]
        if hits:
            return tokens[hits[-1] + k: hits[-1] + k + size]
    return []


def test_the_draft_is_the_one_its_definition_gives():
    """find_draft compares only the earlier places of the last token: the same drafts as comparing every
    start, for small alphabets (many repeats) and large ones (few), every n-gram setting and size."""
    import random

    rng = random.Random(11)
    for i in range(3000):
        cfg = LookupConfig(min_ngram=rng.randint(1, 3), max_ngram=rng.randint(3, 6))
        tokens = [rng.randrange(rng.choice((2, 3, 6, 50))) for _ in range(rng.randrange(0, 60))]
        size = rng.randint(1, 9)
        assert TokenHistory(tokens).find_draft(cfg, size) == _scanned_draft(tokens, cfg, size), (i, tokens, cfg)
