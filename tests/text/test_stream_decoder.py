"""StreamDecoder: whole UTF-8 characters only, and the same text as decode() in the end."""

from __future__ import annotations

import pytest
from strata.engine.text import StreamDecoder

from .conftest import parity_cases

CASES = parity_cases()


def test_emoji_split_over_tokens_comes_out_whole(smollm_tokenizer):
    ids = smollm_tokenizer.encode("a🦙b")
    dec = StreamDecoder(smollm_tokenizer)
    pieces = [dec.push(i) for i in ids]
    assert "".join(pieces) + dec.flush() == "a🦙b"
    assert any(p == "" for p in pieces)  # held back while the emoji was unfinished
    assert "🦙" in pieces or "🦙b" in pieces
    for p in pieces:
        p.encode("utf-8")  # never a lone surrogate / half character


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_stream_equals_decode_on_parity_tokens(smollm_tokenizer, case):
    for ids in (case["tokens"], case.get("greedy", [])):
        dec = StreamDecoder(smollm_tokenizer)
        assert dec.push_many(ids) + dec.flush() == smollm_tokenizer.decode(ids)


def test_unfinished_character_is_flushed_as_replacement(smollm_tokenizer):
    ids = smollm_tokenizer.encode("🦙")
    dec = StreamDecoder(smollm_tokenizer)
    assert dec.push(ids[0]) == ""
    assert dec.pending
    assert dec.flush() == "\ufffd"
    assert not dec.pending
    assert dec.push_many(ids) == "🦙"  # ready for a new stream after flush


def test_skip_special(smollm_tokenizer):
    ids = smollm_tokenizer.encode("hi<|im_end|>")
    dec = StreamDecoder(smollm_tokenizer, skip_special=True)
    assert dec.push_many(ids) + dec.flush() == "hi"
