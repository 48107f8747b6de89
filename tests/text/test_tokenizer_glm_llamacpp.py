"""GLM's pre-tokenizer ("glm4": llama.cpp's LLAMA_VOCAB_PRE_TYPE_CHATGLM4) against llama.cpp's ids
(tests/data/llamacpp_glm_tokens.json, recorded by benchmarks/make_llamacpp_glm_tokens.py with
llama-cpp-python 0.3.36 on tests/fixtures/glm_vocab.py's vocabulary): equal with and without special-token
parsing, no BOS added (the file has no add_bos key), and the same end-of-generation ids (EOS, EOT
"<|user|>", EOM "<|observation|>" and the vocabulary's end-of-turn texts; llama.cpp's fill-in-the-middle
ones apart)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from strata.engine.tokenizer import Tokenizer

from tests.fixtures.glm_vocab import PROMPT, TEXTS, glm_metadata

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "llamacpp_glm_tokens.json").read_text("utf-8"))


@pytest.fixture(scope="module")
def tok(default_model_path) -> Tokenizer:
    return Tokenizer.from_metadata(glm_metadata(default_model_path))


def test_the_data_covers_the_fixture_texts_and_the_prompt():
    assert [c["text"] for c in DATA["cases"]] == list(TEXTS)
    prompt = next(c for c in DATA["cases"] if c["text"] == PROMPT)
    assert prompt["tokens"] != prompt["tokens_no_special"]


@pytest.mark.parametrize("special", [True, False])
def test_ids_equal_llamacpp(tok, special):
    key = "tokens" if special else "tokens_no_special"
    for case in DATA["cases"]:
        assert tok.encode(case["text"], special=special) == case[key], case["text"]


def test_end_of_generation_ids_equal_llamacpp(tok):
    """All but one: llama.cpp also ends generation at fill-in-the-middle repo / pad / file-separator tokens
    (here SmolLM2's `<reponame>`, Granite's name for the repo token), which Strata does not; GLM's
    vocabularies have none of them."""
    assert {tok.token_id("<|user|>"), tok.token_id("<|observation|>")} <= tok.eot_ids
    assert set(DATA["eog"]) - tok.eot_ids == {tok.token_id("<reponame>")}
    assert tok.eot_ids <= set(DATA["eog"])
