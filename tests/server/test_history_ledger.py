"""HistoryLedger: which remembered slot history a prompt continues, and what an overwritten one keeps."""

from __future__ import annotations

import pytest
from strata.server.history_ledger import FINGER_TOKENS, HistoryLedger


def toks(seed: int, n: int) -> list[int]:
    return [seed * 100_000 + i for i in range(n)]


def test_a_prompt_continues_the_longest_remembered_prefix():
    led = HistoryLedger()
    a = toks(1, 100)
    e1 = led.add(a, 1, slot=1)
    e2 = led.add(a + toks(2, 50), 2, slot=2)
    assert led.parent_of(a + toks(2, 50) + toks(3, 10)) is e2
    assert led.parent_of(a + toks(4, 10)) is e1             # an edit after the first turn: the first
    assert led.parent_of(toks(5, 200)) is None              # another conversation
    assert led.parent_of(a[:99]) is None                    # shorter than any remembered prompt


def test_the_answer_after_the_prompt_may_differ_and_the_start_must_match():
    led = HistoryLedger()
    a = toks(1, 100)
    e = led.add(a, 1, slot=1)
    assert led.parent_of(a + [9, 9, 9]) is e
    changed_top = [0] + a[1:] + [9]
    assert led.parent_of(changed_top) is None               # the top of the prompt changed: a new one
    assert led.parent_of(a[:60] + [0] + a[61:] + [9]) is e  # only the ends are compared (fingerprint)
    assert led.parent_of(a[:100 - FINGER_TOKENS] + [0] + a[101 - FINGER_TOKENS:]) is None


def test_release_keeps_length_and_end_and_frees_the_slot():
    led = HistoryLedger()
    e = led.add(toks(1, 100), 3, slot=4)
    assert led.turn_in(4) == 3 and e.slot == 4
    led.release(4, 130, 12.5)
    assert (e.slot, e.n_tokens, e.end, led.turn_in(4)) == (None, 130, 12.5, 0)
    led.release(4, 1, 1.0)                                  # nothing held: nothing changes
    assert (e.n_tokens, e.end) == (130, 12.5)


def test_the_oldest_histories_are_forgotten_first():
    led = HistoryLedger(keep=2)
    led.add(toks(1, 50), 1, slot=1)
    led.add(toks(2, 50), 1, slot=2)
    led.add(toks(3, 50), 1, slot=3)
    assert led.parent_of(toks(1, 60)) is None and led.parent_of(toks(3, 60)) is not None
    assert led.turn_in(1) == 0 and led.turn_in(2) == 1
    with pytest.raises(ValueError, match="keep=0"):
        HistoryLedger(keep=0)


def test_the_head_index_answers_as_a_scan_of_every_remembered_history():
    """parent_of looks only at the histories with the prompt's head (an index kept with each add and each
    forgotten history): the same answers as the scan of all of them, newest first, as histories are
    forgotten and heads come back."""
    import random

    def scanned(led: HistoryLedger, prompt: list[int]):
        best = None
        for e in reversed(led.entries.values()):
            n = e.n_prompt
            if n > len(prompt) or e.head != tuple(prompt[:FINGER_TOKENS]) or (best is not None and n <= best.n_prompt):
                continue
            if tuple(prompt[max(n - FINGER_TOKENS, 0):n]) == e.tail:
                best = e
        return best

    rng = random.Random(5)
    led = HistoryLedger(keep=7)
    heads = [toks(h, FINGER_TOKENS) for h in range(3)] + [[1, 2]]       # [1, 2]: a prompt shorter than a head
    for i in range(400):
        prompt = rng.choice(heads) + [rng.randrange(3) for _ in range(rng.randrange(0, 40))]
        assert led.parent_of(prompt) is scanned(led, prompt), i
        if rng.random() < 0.6:
            led.add(prompt, i, slot=rng.randrange(4))
    assert sum(len(d) for d in led._by_head.values()) == len(led.entries) == 7
