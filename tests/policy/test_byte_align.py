"""byte_align.walk / aligned_prompt on hand-made token tables: where a prompt that goes on as the same bytes as a
history in other tokens is in step with it again, and what it then becomes."""

from __future__ import annotations

import pytest
from strata.server.byte_align import aligned_prompt, walk

# id -> bytes; 90 is a special (<|im_end|>, rendered as its text by token_bytes), 91-93 its text as plain tokens
TABLE = {
    1: b"The", 2: b" cat", 3: b" sat", 4: b"\n", 5: b"\n\n", 6: b"<read", 7: b"_file", 8: b">",
    10: b" ca", 11: b"t", 12: b" s", 13: b"at", 14: b' "', 15: b'">', 16: b'"', 17: b" ", 18: b" dog",
    20: b" on", 21: b" the", 22: b" mat",
    90: b"<|im_end|>", 91: b"<|", 92: b"im_end", 93: b"|>",
}
ATOMS = frozenset({90})


def tb(t: int) -> bytes:
    return TABLE[t]


def test_a_word_split_otherwise_is_in_step_after_it():
    history = [1, 10, 11, 3]          # The| ca|t| sat  (the model's split)
    prompt = [1, 2, 3, 20]            # The| cat| sat| on (the tokenizer's, then more)
    a = walk(history, prompt, 1, tb, ATOMS)
    assert (a.history_at, a.prompt_at, a.covered) == (4, 3, True)
    out = aligned_prompt([history], prompt, tb, ATOMS)
    assert out.prompt == [1, 10, 11, 3, 20] and (out.source, out.held_before, out.held_after) == (0, 1, 4)


def test_the_split_at_a_token_boundary():
    # assistant\n + \n<read_file> read back as \n\n: the history's two newlines against the prompt's one token
    history = [1, 4, 4, 6, 7, 8]
    prompt = [1, 5, 6, 7, 8, 2]
    a = walk(history, prompt, 1, tb, ATOMS)
    assert (a.history_at, a.prompt_at, a.covered) == (6, 5, True)
    assert aligned_prompt([history], prompt, tb, ATOMS).prompt == [1, 4, 4, 6, 7, 8, 2]


def test_a_tool_calls_quote_split_both_ways():
    history = [1, 17, 15, 3]          # ' ' + '">'
    prompt = [1, 14, 8, 3, 18]        # ' "' + '>'
    a = walk(history, prompt, 1, tb, ATOMS)
    assert (a.history_at, a.prompt_at) == (4, 4)
    assert aligned_prompt([history], prompt, tb, ATOMS).prompt == [1, 17, 15, 3, 18]


def test_a_special_never_aligns_with_its_literal_text():
    history = [1, 90, 4]              # <|im_end|> the special
    prompt = [1, 91, 92, 93, 4]       # the same bytes as plain text
    assert TABLE[90] == b"".join(TABLE[t] for t in (91, 92, 93))
    a = walk(history, prompt, 1, tb, ATOMS)
    assert (a.history_at, a.prompt_at, a.covered) == (1, 1, False)
    assert walk(prompt, history, 1, tb, ATOMS).history_at == 1          # nor the other way round
    out = aligned_prompt([history], prompt, tb, ATOMS)
    assert out.source is None and out.prompt == prompt
    # mid-walk too: the literal's first piece joins bytes the other side is ahead by
    assert walk([1, 10, 11, 90], [1, 2, 91, 92, 93], 1, tb, ATOMS).history_at == 3


def test_the_same_special_on_both_sides_goes_on():
    history = [1, 10, 11, 90, 4]
    prompt = [1, 2, 90, 4, 18]
    a = walk(history, prompt, 1, tb, ATOMS)
    assert (a.history_at, a.prompt_at, a.covered) == (5, 4, True)


def test_bytes_differing_later_keep_the_last_point_in_step():
    history = [1, 10, 11, 3, 20, 21, 22]    # The cat sat on the mat
    prompt = [1, 2, 12, 13, 20, 18]          # The cat sat on dog: differs at the history's ' the'
    a = walk(history, prompt, 1, tb, ATOMS)
    assert (a.history_at, a.prompt_at, a.covered) == (5, 5, False)
    assert aligned_prompt([history], prompt, tb, ATOMS).prompt == [1, 10, 11, 3, 20, 18]


def test_a_difference_right_after_the_prefix_aligns_nothing():
    history = [1, 18, 3]
    prompt = [1, 2, 3]
    assert (walk(history, prompt, 1, tb, ATOMS).history_at, walk(history, prompt, 1, tb, ATOMS).covered) == (1, False)
    assert aligned_prompt([history], prompt, tb, ATOMS).source is None


def test_a_history_ending_inside_a_prompt_token_is_covered_not_in_step():
    history = [1, 10]                 # ' ca'
    prompt = [1, 2, 3]                # ' cat' goes past the history's end
    a = walk(history, prompt, 1, tb, ATOMS)
    assert (a.history_at, a.prompt_at, a.covered) == (1, 1, True)


def test_the_walk_stops_at_its_bound_where_it_was_last_in_step():
    history = [1] + [10, 11] * 50 + [3]     # ' ca' 't' fifty times
    prompt = [1] + [2] * 50 + [3]
    whole = walk(history, prompt, 1, tb, ATOMS)
    assert (whole.history_at, whole.prompt_at) == (102, 52)
    cut = walk(history, prompt, 1, tb, ATOMS, max_bytes=20)   # 4 bytes compared a word
    assert (cut.history_at, cut.prompt_at, cut.covered) == (11, 6, False)
    assert walk(history, prompt, 1, tb, ATOMS, max_bytes=0).history_at == 1


def test_runs_of_the_same_tokens_cost_no_bytes_of_the_bound():
    same = [21, 22, 20] * 400                # 1,200 tokens both sides hold alike after the split
    history = [1, 10, 11] + same + [10, 11]
    prompt = [1, 2] + same + [2, 18]
    a = walk(history, prompt, 1, tb, ATOMS, max_bytes=8)
    assert (a.history_at, a.prompt_at, a.covered) == (len(history), len(prompt) - 1, True)


def test_each_stretch_out_of_step_has_its_bound_and_the_walk_one_in_all():
    # thirty words split otherwise, each followed by a token both hold: 4 bytes out of step at a time
    history = [1] + [10, 11, 21] * 30 + [3]
    prompt = [1] + [2, 21] * 30 + [3, 18]
    a = walk(history, prompt, 1, tb, ATOMS, max_bytes=8)
    assert (a.history_at, a.prompt_at, a.covered, a.compared) == (len(history), len(prompt) - 1, True, 120)
    a = walk(history, prompt, 1, tb, ATOMS, max_total=40)          # the 11th word is past 40 in all
    assert (a.history_at, a.prompt_at, a.covered) == (31, 21, False)
    # the same words without the shared token between them: one stretch, cut by max_bytes
    assert walk([1] + [10, 11] * 30, [1] + [2] * 30, 1, tb, ATOMS, max_bytes=8).history_at == 5


def test_one_bound_in_all_for_the_histories_the_most_shared_walked_first():
    history = [1] + [10, 11] * 50 + [3]     # 4 bytes compared a word, 100 words past the split
    prompt = [1] + [2] * 50 + [3, 18]
    wide = [1, 2, 2, 2, 2, 2, 2]            # holds 7 of its tokens as they are, nothing past them: not walked
    out = aligned_prompt([history, wide], prompt, tb, ATOMS, max_total=40)
    assert (out.source, out.held_before, out.held_after) == (0, 7, 21)   # 10 words within 40 bytes
    # what the first history walked spends the next does not get: 5 words and a differing one (23 bytes), then
    # 4 words of the other (16) before the 40 are spent; each alone with 40 would reach 10 words (21 tokens)
    spender = [1] + [10, 11] * 5 + [20]             # walked first (the same share: in order)
    out = aligned_prompt([spender, history], prompt, tb, ATOMS, max_total=40)
    assert (out.source, out.held_after) == (0, 11)
    assert walk(spender, prompt, 1, tb, ATOMS, max_total=40).compared == 23
    assert walk(history, prompt, 1, tb, ATOMS, max_total=40 - 23).history_at == 9
    assert walk(history, prompt, 1, tb, ATOMS, max_total=40).compared == 43   # stops on the word past the bound


def test_the_history_holding_most_once_aligned_is_chosen():
    canonical_copy = [1, 2, 3, 4]            # holds the prompt's tokens as they are: 3 of them
    models_own = [1, 10, 11, 3, 20, 21]      # the same bytes and more, in the model's tokens
    prompt = [1, 2, 3, 20, 21, 22]
    out = aligned_prompt([canonical_copy, models_own], prompt, tb, ATOMS)
    assert (out.source, out.held_before, out.held_after) == (1, 3, 6)
    assert out.prompt == [1, 10, 11, 3, 20, 21, 22]
    # where the canonical copy already holds more than the alignment gives, the prompt is left as it is
    out = aligned_prompt([[1, 2, 3, 20, 21], [1, 10, 11, 3]], prompt, tb, ATOMS)
    assert out.source is None and out.prompt == prompt and out.held_before == 5


def test_bad_bounds_are_refused_naming_them():
    with pytest.raises(ValueError, match="max_bytes must be >= 0, got -1"):
        walk([1], [1], 1, tb, ATOMS, max_bytes=-1)
    with pytest.raises(ValueError, match="max_total must be >= 0, got -2"):
        walk([1], [1], 1, tb, ATOMS, max_total=-2)
    with pytest.raises(ValueError, match="held 3"):
        walk([1], [1, 2], 3, tb, ATOMS)


def test_a_character_in_byte_tokens_aligns_byte_wise():
    # byte-fallback pieces of one UTF-8 character (<0xE2> <0x80> <0x99>: a right quote) against the character as
    # one token, and split otherwise; a character sharing only its first bytes is not in step inside it
    table = {**TABLE, 40: b"\xe2", 41: b"\x80", 42: b"\x99", 43: "\u2019".encode(), 44: b"\xe2\x80",
             45: "\u201c".encode()}
    bytes_of = table.__getitem__
    history = [1, 40, 41, 42, 3]              # The<E2><80><99> sat
    prompt = [1, 43, 3, 20]                   # The’ sat on
    a = walk(history, prompt, 1, bytes_of, ATOMS)
    assert (a.history_at, a.prompt_at, a.covered) == (5, 3, True)
    assert aligned_prompt([history], prompt, bytes_of, ATOMS).prompt == [1, 40, 41, 42, 3, 20]
    assert walk([1, 44, 42, 3], [1, 40, 41, 42, 3], 1, bytes_of, ATOMS).history_at == 4
    a = walk(history, [1, 45, 3], 1, bytes_of, ATOMS)     # “ shares <E2><80> with ’
    assert (a.history_at, a.prompt_at, a.covered) == (1, 1, False)
