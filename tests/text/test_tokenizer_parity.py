"""The tokenizer against llama.cpp's token ids on the default model (tests/data/llamacpp_tokens.json)."""

from __future__ import annotations

import pytest

from .conftest import parity_cases

CASES = parity_cases()


def test_parity_file_covers_the_required_kinds(parity):
    names = {c["name"] for c in parity["cases"]}
    kinds = {c["kind"] for c in parity["cases"]}
    assert kinds == {"plain", "chat"}
    for needed in ("digits_sum", "accents_fr", "emoji", "code_python", "whitespace_runs", "special_inline"):
        assert needed in names
    assert "command" in parity and "make_llamacpp_tokens.py" in parity["command"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_ids_equal_llamacpp_with_special_parsing(smollm_tokenizer, case):
    assert smollm_tokenizer.encode(case["text"], special=True) == case["tokens"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_ids_equal_llamacpp_without_special_parsing(smollm_tokenizer, case):
    assert smollm_tokenizer.encode(case["text"], special=False) == case["tokens_no_special"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decode_gives_back_the_text(smollm_tokenizer, case):
    if case["name"] == "bytes_without_tokens":
        pytest.skip("bytes the vocabulary has no token for are dropped (by llama.cpp as well)")
    assert smollm_tokenizer.decode(case["tokens"]) == case["text"]
    assert smollm_tokenizer.decode(case["tokens_no_special"]) == case["text"]


def test_special_parsing_changes_ids_only_where_specials_are_written(smollm_tokenizer):
    with_special = [c for c in CASES if c["tokens"] != c["tokens_no_special"]]
    assert with_special, "the data must have a case where special parsing matters"
    for c in with_special:
        assert "<|" in c["text"] or "<file_sep>" in c["text"]
    im_start = smollm_tokenizer.token_id("<|im_start|>")
    assert im_start in smollm_tokenizer.encode("<|im_start|>user", special=True)
    assert im_start not in smollm_tokenizer.encode("<|im_start|>user", special=False)
