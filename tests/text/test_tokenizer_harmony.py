"""gpt-oss's vocabulary (o200k_harmony): the "gpt-4o" pre-tokenizer and its other names, the end-of-generation
tokens (llama.cpp's workaround: "<|return|>" and "<|call|>" end generation, "<|end|>" does not) and the
Harmony markup that is always parsed and rendered. Vocabularies are generated (tests/fixtures/bpe_vocab.py);
no model file is needed."""

from __future__ import annotations

import pytest
from strata.engine.tokenizer import (
    PRE_TOKENIZERS,
    TOKEN_CONTROL,
    TOKEN_USER_DEFINED,
    Tokenizer,
)

from tests.fixtures.bpe_vocab import build_vocab

HARMONY_TOKENS = ("<|startoftext|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                  "<|return|>", "<|call|>")
MARKUP = ("<|start|>", "<|message|>", "<|channel|>", "<|constrain|>")


def _metadata(pre: str = "gpt-4o", extra: tuple[str, ...] = (), extra_type: int = TOKEN_CONTROL, **keys) -> dict:
    v = build_vocab(512)
    md = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": list(v.tokens) + list(extra),
        "tokenizer.ggml.token_type": list(v.token_types) + [extra_type] * len(extra),
        "tokenizer.ggml.merges": list(v.merges),
    }
    md.update({f"tokenizer.ggml.{k}": val for k, val in keys.items()})
    return md


@pytest.fixture(scope="module")
def o200k() -> Tokenizer:
    return Tokenizer.from_metadata(_metadata())


@pytest.fixture(scope="module")
def harmony() -> Tokenizer:
    # as a gpt-oss GGUF: the Harmony tokens are CONTROL, EOS is "<|return|>"
    n = len(build_vocab(512).tokens)
    return Tokenizer.from_metadata(_metadata(extra=HARMONY_TOKENS, bos_token_id=n,
                                             eos_token_id=n + HARMONY_TOKENS.index("<|return|>")))


# ----- pre-tokenizer -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        # contractions belong to the word before them, in any case; capitals start a new piece
        ("I'M HERE, you'RE there; They'll WE'VE", ["I'M", " HERE", ",", " you'RE", " there", ";", " They'll",
                                                  " WE'VE"]),
        ("HTTPServer getHTTPResponse naïve Déjà", ["HTTPServer", " get", "HTTPResponse", " naïve", " Déjà"]),
        # numbers in groups of at most three digits, the space before them apart
        ("a 1 12 123 1234 12345 123456 1234567",
         ["a", " ", "1", " ", "12", " ", "123", " ", "123", "4", " ", "123", "45", " ", "123", "456",
          " ", "123", "456", "7"]),
        ("中文字符 漢字 and カタカナ", ["中文字符", " 漢字", " and", " カタカナ"]),
        # newlines: with the spaces before them, never with the word after
        ("x\n\ny \r\n z  \n", ["x", "\n\n", "y", " \r\n", " z", "  \n"]),
        # punctuation takes the newlines and slashes after it
        ("end.\n/path//x: a/b ./c", ["end", ".\n/", "path", "//", "x", ":", " a", "/b", " ./", "c"]),
        ("  lead  trail  ", [" ", " lead", " ", " trail", "  "]),
    ],
)
def test_o200k_regex_pieces(o200k, text, pieces):
    assert o200k.pre_tokenize(text) == pieces


TRICKY = [
    "I'M HERE, you'RE there; They'll WE'VE don'T",
    "x = 1234567 + 89; print(f'{x:,}')\n\n\tdef f(a/b): return a//b",
    "中文字符 漢字 and カタカナ 🙂 naïve Déjà",
    "end.\n/path//x: a/b ./c\r\n  \n",
]


@pytest.mark.parametrize("text", TRICKY)
def test_tokens_never_cross_pieces_and_round_trip(o200k, text):
    ids = o200k.encode(text)
    assert o200k.decode(ids) == text
    by_piece = [i for piece in o200k.pre_tokenize(text) for i in o200k.encode(piece)]
    assert ids == by_piece


def test_gpt4o_names_share_one_regex_without_bos_or_ignored_merges():
    # llama-vocab.cpp: "gpt-4o", "llama4", "kanana2", "talkie" -> LLAMA_VOCAB_PRE_TYPE_GPT4O, and
    # "minimax-m2" runs the same regexes; none sets add_bos or ignore_merges
    rules = {PRE_TOKENIZERS[name] for name in ("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2")}
    assert len(rules) == 1
    regexes, ignore_merges, add_bos = rules.pop()
    assert len(regexes) == 1 and r"\p{N}{1,3}" in regexes[0] and "[\\r\\n/]*" in regexes[0]
    assert (ignore_merges, add_bos) == (False, False)
    assert Tokenizer.from_metadata(_metadata(pre="llama4")).add_bos is False


# ----- end of generation ---------------------------------------------------------------------------

def test_return_and_call_end_generation_and_end_does_not(harmony):
    eog = {harmony.token_text(i) for i in harmony.eot_ids}
    assert {"<|return|>", "<|call|>"} <= eog
    assert "<|end|>" not in eog
    assert "<|start|>" not in eog and "<|channel|>" not in eog


def test_end_is_end_of_generation_without_the_harmony_pair():
    # a vocabulary with "<|end|>" but no "<|return|>" / "<|call|>" (Phi-3 style) ends at "<|end|>"
    tok = Tokenizer.from_metadata(_metadata(extra=("<|end|>", "<|return|>")))
    eog = {tok.token_text(i) for i in tok.eot_ids}
    assert "<|end|>" in eog and "<|return|>" in eog
    assert tok.token_id("<|end|>") in tok.special_ids      # stays a CONTROL token


def test_end_leaves_even_when_it_is_the_files_eot_token():
    n = len(build_vocab(512).tokens)
    tok = Tokenizer.from_metadata(_metadata(extra=HARMONY_TOKENS, eot_token_id=n + HARMONY_TOKENS.index("<|end|>")))
    assert tok.token_id("<|end|>") not in tok.eot_ids


def test_solar_open_pair_also_keeps_end_going():
    tok = Tokenizer.from_metadata(_metadata(extra=("<|end|>", "<|calls|>", "<|flush|>")))
    assert {tok.token_text(i) for i in tok.eot_ids} >= {"<|calls|>", "<|flush|>"}
    assert tok.token_id("<|end|>") not in tok.eot_ids


@pytest.mark.parametrize("pair", [("<|return|>", "<|calls|>"), ("<|call|>", "<|flush|>")])
def test_the_mixed_pairs_keep_end_going_as_in_llama_cpp(pair):
    # llama.cpp counts "<|call|>" and "<|calls|>" alike: <|return|> with either, or either with <|flush|>
    tok = Tokenizer.from_metadata(_metadata(extra=("<|end|>", *pair)))
    assert {tok.token_text(i) for i in tok.eot_ids} >= set(pair)
    assert tok.token_id("<|end|>") not in tok.eot_ids


# ----- markup always parsed and rendered ----------------------------------------------------------

def test_markup_is_parsed_and_rendered_even_without_special(harmony):
    text = "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|end|>"
    ids = harmony.encode(text, special=False)
    for t in MARKUP + ("<|end|>",):
        assert harmony.token_id(t) in ids, t
        assert harmony.token_id(t) not in harmony.special_ids, t
    assert harmony.decode(ids, skip_special=True) == text


def test_return_and_call_stay_control_tokens(harmony):
    for t in ("<|return|>", "<|call|>"):
        assert harmony.token_id(t) in harmony.special_ids
        assert harmony.token_id(t) not in harmony.encode(f"x{t}", special=False)
        assert harmony.token_id(t) in harmony.encode(f"x{t}", special=True)
    assert harmony.decode([harmony.token_id("<|call|>")]) == "<|call|>"


def test_markup_types_follow_llamacpp(harmony):
    # the file says CONTROL; llama.cpp reads the four markup tokens and "<|end|>" as USER_DEFINED
    types = harmony._vocab.types
    assert all(types[harmony.token_id(t)] == TOKEN_USER_DEFINED for t in MARKUP + ("<|end|>",))
    assert types[harmony.token_id("<|return|>")] == TOKEN_CONTROL


def test_start_opens_messages_for_the_segment_tier(harmony):
    assert harmony.token_id("<|start|>") in harmony.message_opener_ids
