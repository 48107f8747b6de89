"""The pre-tokenizer names added for the architectures Strata runs (seed-coder, smaug-bpe, deepseek-llm,
deepseek-coder, falcon, exaone4, ...) against llama.cpp's ids (tests/data/llamacpp_pre_tokens.json, recorded
by benchmarks/make_llamacpp_pre_tokens.py with llama-cpp-python 0.3.36 on tests/fixtures/pre_vocab.py's
vocabularies): the same ids for every text, the same BOS default, under each name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from strata.engine.tokenizer import PRE_TOKENIZERS, Tokenizer

from tests.fixtures.pre_vocab import NAMES, TEXTS, pre_metadata

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "llamacpp_pre_tokens.json").read_text("utf-8"))
BY_NAME = {case["pre"]: case for case in DATA["names"]}


def test_the_data_covers_the_fixture():
    assert DATA["texts"] == list(TEXTS)
    assert list(BY_NAME) == list(NAMES)
    assert set(NAMES) <= set(PRE_TOKENIZERS)


@pytest.mark.parametrize("pre", NAMES)
def test_ids_and_bos_equal_llamacpp(default_model_path, pre):
    tok = Tokenizer.from_metadata(pre_metadata(default_model_path, pre))
    case = BY_NAME[pre]
    assert tok.add_bos is case["add_bos"]
    for text, want in zip(TEXTS, case["tokens"], strict=True):
        assert tok.encode(text, special=False) == want, (pre, text)


def test_the_texts_tell_the_new_rules_apart():
    """Each new name's llama.cpp ids differ from those of every other rule set on some text (so a wrong
    regex, merge rule or BOS default under a name fails the test above); names that share a rule set in
    llama.cpp give the same ids."""
    same_rules: dict[tuple, list[str]] = {}
    for name in NAMES:
        same_rules.setdefault(PRE_TOKENIZERS[name], []).append(name)
    groups = list(same_rules.values())
    for group in groups:
        assert all(BY_NAME[n]["tokens"] == BY_NAME[group[0]]["tokens"] for n in group), group
    firsts = [BY_NAME[g[0]] for g in groups]
    for i, a in enumerate(firsts):
        for b in firsts[i + 1:]:
            assert (a["tokens"], a["add_bos"]) != (b["tokens"], b["add_bos"]), (a["pre"], b["pre"])
