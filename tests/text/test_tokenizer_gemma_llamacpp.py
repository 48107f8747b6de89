"""Gemma 3's SentencePiece settings against llama.cpp (tests/data/llamacpp_gemma_tokens.json, recorded by
benchmarks/make_llamacpp_gemma_tokens.py with llama-cpp-python 0.3.36 on tests/text/gemma_vocab.py's vocabulary
in Gemma 3's shape): no space prefix (add_space_prefix false), BOS from add_bos_token, byte fallback for
characters that are no piece, whitespace runs as pieces, `<start_of_turn>` / `<end_of_turn>` parsed only with
special tokens on, and `<end_of_turn>` ending generation beside `<eos>`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from strata.engine.tokenizer import Tokenizer

from .gemma_vocab import PROMPT, TEXTS, gemma_metadata, write_gemma_gguf

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "llamacpp_gemma_tokens.json").read_text("utf-8"))


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    from strata.engine import GGUFFile

    path = write_gemma_gguf(tmp_path_factory.mktemp("gemma") / "gemma.gguf")
    # the same file llama.cpp tokenized, byte for byte
    assert hashlib.sha256(path.read_bytes()).hexdigest() == DATA["gguf_sha256"]
    return Tokenizer.from_metadata(GGUFFile(path).metadata)


def test_the_data_covers_the_fixture_texts():
    assert [c["text"] for c in DATA["cases"]] == list(TEXTS)


@pytest.mark.parametrize("special", [True, False])
def test_ids_equal_llamacpp(tok, special):
    key = "tokens" if special else "tokens_no_special"
    for case in DATA["cases"]:
        assert tok.encode(case["text"], special=special, add_bos=True) == case[key], case["text"]


def test_gemma_settings(tok):
    assert tok.kind == "spm" and tok.add_bos is DATA["add_bos"] is True
    assert tok.eot_ids == set(DATA["eog"]) == {tok.token_id("<eos>"), tok.token_id("<end_of_turn>")}
    # no space prefix: "Hello" is the piece without "▁", and decodes to itself
    assert tok.encode("Hello", add_bos=False) == [tok.token_id("Hello")]
    assert tok.decode(tok.encode("Hello there", add_bos=False)) == "Hello there"
    # the template writes <bos> itself: the default adds no second one, as llama.cpp's server does not
    assert tok.encode(PROMPT).count(tok.bos_id) == 1
    assert tok.token_id("<start_of_turn>") in tok.message_opener_ids


def test_the_space_prefix_matters(tok):
    """With llama.cpp's SentencePiece default (a space prefix) the ids differ: the test above can fail."""
    prefixed = Tokenizer.from_metadata({**gemma_metadata(), "tokenizer.ggml.add_space_prefix": True})
    case = DATA["cases"][0]
    assert prefixed.encode(case["text"], add_bos=True) != case["tokens"] == tok.encode(case["text"], add_bos=True)
