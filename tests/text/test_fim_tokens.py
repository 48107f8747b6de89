"""The fill-in-the-middle tokens the engine finds in a GGUF vocabulary (strata.engine.fim): the
`tokenizer.ggml.fim_*_token_id` keys first, the older prefix / suffix / middle keys, else the token texts
llama.cpp knows (the first of its list the vocabulary has); a key that is not a token id is refused by name.
SmolLM2's vocabulary (the default model) has Granite's repo token `<reponame>` and no prefix, suffix or
middle token: it cannot fill in the middle."""

from __future__ import annotations

import pytest
from strata.engine import GGUFFile
from strata.engine.fim import FimTokens
from strata.engine.tokenizer import Tokenizer, TokenizerError

from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model


@pytest.fixture(scope="module")
def plain_md(tiny_model_factory):
    """Metadata of a tiny model whose last six tokens are Qwen2.5-Coder's FIM texts (ids 512-517), no keys."""
    return dict(GGUFFile(tiny_model_factory(n_vocab=512, seed=3, added_tokens=FIM_TEXTS)).metadata)


def with_tokens(md: dict, renamed: dict[int, str]) -> dict:
    tokens = list(md["tokenizer.ggml.tokens"])
    for i, text in renamed.items():
        tokens[i] = text
    return {**md, "tokenizer.ggml.tokens": tokens}


def test_found_by_qwen_texts(plain_md):
    fim = Tokenizer.from_metadata(plain_md).fim
    assert fim == FimTokens(pre=512, suf=513, mid=514, pad=515, rep=516, sep=517)
    assert fim.usable and fim.missing == () and fim.end_ids == {515, 516, 517}


def test_the_keys_win_over_the_texts(plain_md):
    keyed = {**plain_md, "tokenizer.ggml.fim_pre_token_id": 100, "tokenizer.ggml.fim_suf_token_id": 101,
             "tokenizer.ggml.fim_mid_token_id": 102, "tokenizer.ggml.fim_sep_token_id": 103}
    assert Tokenizer.from_metadata(keyed).fim == FimTokens(pre=100, suf=101, mid=102, pad=515, rep=516, sep=103)


def test_the_older_prefix_suffix_middle_keys(plain_md):
    older = {**plain_md, "tokenizer.ggml.prefix_token_id": 200, "tokenizer.ggml.suffix_token_id": 201,
             "tokenizer.ggml.middle_token_id": 202, "tokenizer.ggml.fim_pre_token_id": 210}
    fim = Tokenizer.from_metadata(older).fim
    assert (fim.pre, fim.suf, fim.mid) == (210, 201, 202)     # the newer key first


@pytest.mark.parametrize("texts, expected", [
    ({512: "<fim_prefix>", 513: "<fim_suffix>", 514: "<fim_middle>", 515: "<fim_pad>", 516: "<reponame>",
      517: "<filename>"}, FimTokens(pre=512, suf=513, mid=514, pad=515, rep=516)),           # StarCoder, Granite
    ({512: "<fim-prefix>", 513: "<fim-suffix>", 514: "<fim-middle>", 515: "<fim-pad>", 516: "<fim-repo>",
      517: "<x>"}, FimTokens(pre=512, suf=513, mid=514, pad=515, rep=516)),                  # OpenCoder
    ({512: "<PRE>", 513: "<SUF>", 514: "<MID>", 515: "<EOT>", 516: "<a>", 517: "<b>"},
     FimTokens(pre=512, suf=513, mid=514)),                                                  # CodeLlama
    ({512: "<|code_prefix|>", 513: "<|code_suffix|>", 514: "<|code_middle|>", 515: "<c>", 516: "<d>", 517: "<e>"},
     FimTokens(pre=512, suf=513, mid=514)),                                                  # GLM-4.5
])
def test_other_families_texts(plain_md, texts, expected):
    assert Tokenizer.from_metadata(with_tokens(plain_md, texts)).fim == expected


def test_the_first_text_of_the_list_wins(plain_md):
    both = with_tokens(plain_md, {515: "<PRE>"})      # "<|fim_prefix|>" (512) comes first in the list
    assert Tokenizer.from_metadata(both).fim.pre == 512


def test_a_vocabulary_like_smollm2s_cannot_fill_in_the_middle(plain_md):
    smol = with_tokens(plain_md, {512: "<repo_name>", 513: "<reponame>", 514: "<file_sep>", 515: "<filename>",
                                  516: "<gh_stars>", 517: "<issue_start>"})
    fim = Tokenizer.from_metadata(smol).fim
    assert fim == FimTokens(rep=513) and not fim.usable
    assert fim.missing == ("prefix", "suffix", "middle")


@pytest.mark.parametrize("value, says", [(518, "outside the vocabulary of 518 tokens"), ("12", "is not a token id")])
def test_a_key_that_is_no_token_id_is_refused_by_name(plain_md, value, says):
    with pytest.raises(TokenizerError, match=rf"tokenizer\.ggml\.fim_mid_token_id.*{says}"):
        Tokenizer.from_metadata({**plain_md, "tokenizer.ggml.fim_mid_token_id": value})


def test_the_fixture_files_keys_and_control_types(tiny_model_factory, tmp_path):
    """tests/fixtures/fim_gguf.py: the keys it writes are read back, and the tokens are CONTROL (a FIM text in
    a file's code stays text when read without special tokens, as the prefix and suffix are)."""
    plain = tiny_model_factory(n_vocab=512, seed=3, added_tokens=FIM_TEXTS)
    tok = Tokenizer.from_metadata(GGUFFile(fim_model(plain, tmp_path / "fim.gguf")).metadata)
    assert tok.fim == FimTokens(pre=512, suf=513, mid=514, pad=515, rep=516, sep=517)
    assert 512 not in tok.encode("<|fim_prefix|>x", special=False)
    assert tok.encode("<|fim_prefix|>x", special=True)[0] == 512
