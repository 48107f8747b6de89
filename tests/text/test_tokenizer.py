"""Tokenizer construction from GGUF metadata: ids, special tokens, BOS, bytes, and clear errors."""

from __future__ import annotations

import re

import pytest
from strata.engine.tokenizer import PRE_TOKENIZERS, Tokenizer, TokenizerError


def test_smollm_vocabulary_facts(smollm_tokenizer):
    tok = smollm_tokenizer
    assert tok.n_vocab == 49152
    assert (tok.bos_id, tok.eos_id) == (1, 2)
    assert tok.token_text(1) == "<|im_start|>" and tok.token_text(2) == "<|im_end|>"
    assert tok.eot_ids == {0, 2}  # <|endoftext|> and <|im_end|>
    assert tok.message_opener_ids == [1]
    assert tok.special_ids == set(range(17))  # the 17 CONTROL tokens
    assert tok.add_bos is False  # tokenizer.ggml.add_bos_token = false


def test_token_bytes_are_raw_bytes(smollm_tokenizer):
    tok = smollm_tokenizer
    ids = tok.encode("🦙")
    assert len(ids) > 1  # an emoji spans several byte-level tokens
    assert b"".join(tok.token_bytes(i) for i in ids) == "🦙".encode()
    assert tok.token_bytes(tok.token_id("Ġthe")) == b" the"
    assert tok.token_bytes(2) == b"<|im_end|>"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.token_bytes(49152)


def test_decode_skip_special(smollm_tokenizer):
    ids = smollm_tokenizer.encode("<|im_start|>user\nhi<|im_end|>")
    assert smollm_tokenizer.decode(ids, skip_special=True) == "user\nhi"


def test_encode_rejects_non_text(smollm_tokenizer):
    with pytest.raises(TypeError, match="needs a str"):
        smollm_tokenizer.encode(b"bytes")


def test_a_lone_surrogate_is_encoded_as_a_replacement_character(smollm_tokenizer):
    """A tool call's arguments '{"path": "a\\ud800"}' parsed for a template give a str no UTF-8 holds; the
    tokenizers library's TypeError was a 500 (found by tests/server/body_fuzz.py). Read as U+FFFD, one character
    for one (encode_spans' offsets stay the text's)."""
    tok = smollm_tokenizer
    for special in (True, False):
        assert tok.encode("a\ud800b", special=special) == tok.encode("a\ufffdb", special=special)
    assert tok.encode_spans("x\udc00y") == tok.encode_spans("x\ufffdy")


def _with(metadata: dict, **changes) -> dict:
    md = dict(metadata)
    for k, v in changes.items():
        key = "tokenizer.ggml." + k
        if v is None:
            md.pop(key, None)
        else:
            md[key] = v
    return md


def test_add_bos_is_honoured_and_not_doubled(default_metadata):
    tok = Tokenizer.from_metadata(_with(default_metadata, add_bos_token=True))
    plain = Tokenizer.from_metadata(default_metadata)
    assert tok.encode("hello") == [tok.bos_id] + plain.encode("hello")
    assert tok.encode("<|im_start|>hello") == plain.encode("<|im_start|>hello")  # already starts with BOS
    assert tok.encode("hello", add_bos=False) == plain.encode("hello")
    assert plain.encode("hello", add_bos=True)[0] == plain.bos_id


def test_llama3_family_defaults_to_bos(default_metadata):
    assert Tokenizer.from_metadata(_with(default_metadata, pre="llama-bpe", add_bos_token=None)).add_bos is True
    assert Tokenizer.from_metadata(_with(default_metadata, pre="smollm", add_bos_token=None)).add_bos is False


@pytest.mark.parametrize(
    ("pre", "text", "pieces"),
    [
        ("smollm", "x 12345!", ["x", " ", "1", "2", "3", "4", "5", "!"]),
        ("llama-bpe", "x 12345!", ["x", " ", "123", "45", "!"]),
        ("qwen2", "x 12345!", ["x", " ", "1", "2", "3", "4", "5", "!"]),
        ("gpt2", "x 12345!", ["x", " 12345", "!"]),
        ("default", "x 12345!", ["x", " ", "123", "45", "!"]),
        ("llama-bpe", "it's\n\n  ok", ["it", "'s", "\n\n", " ", " ok"]),
        ("smollm", "it's  ok", ["it", "'s", " ", " ok"]),
    ],
)
def test_pre_tokenizer_regexes_cut_like_llamacpp(default_metadata, pre, text, pieces):
    assert _for_pre(default_metadata, pre).pre_tokenize(text) == pieces


_BY_PRE: dict[str, Tokenizer] = {}


def _for_pre(metadata: dict, pre: str) -> Tokenizer:
    """One tokenizer per pre-tokenizer name for the whole module (building one takes ~0.2 s)."""
    if pre not in _BY_PRE:
        _BY_PRE[pre] = Tokenizer.from_metadata(_with(metadata, pre=pre))
    return _BY_PRE[pre]


# one name per distinct regex set (the other names share the same regexes)
DISTINCT_PRES = sorted({regexes: name for name, (regexes, _, _) in PRE_TOKENIZERS.items()}.values())


@pytest.mark.parametrize("pre", DISTINCT_PRES)
def test_every_pre_tokenizer_regex_set_builds_and_round_trips(default_metadata, pre):
    tok = _for_pre(default_metadata, pre)
    text = "Hello, wörld! 12345  x\n\ty 🙂 <|im_end|>"
    assert tok.decode(tok.encode(text, add_bos=False)) == text


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"model": "t5"}, "unsupported tokenizer model 't5'"),
        ({"model": "llama"}, "tokenizer.ggml.scores is missing"),  # SentencePiece: needs its scores
        ({"model": "bert"}, "unsupported tokenizer model 'bert'"),
        ({"model": None}, "tokenizer.ggml.model is missing"),
        ({"pre": "no-such-pre"}, "unknown pre-tokenizer tokenizer.ggml.pre='no-such-pre'"),
        ({"tokens": []}, "tokenizer.ggml.tokens is missing or empty"),
        ({"merges": None}, "tokenizer.ggml.merges is missing"),
        ({"token_type": [1, 1, 3]}, "token_type has 3 entries for 49152 tokens"),
        ({"eos_token_id": 60000}, "tokenizer.ggml.eos_token_id=60000 is outside the vocabulary"),
        # a token id that is not an integer (a crafted or broken file): named, never a TypeError
        ({"eom_token_id": [1, 2]}, "tokenizer.ggml.eom_token_id=[1, 2] is not a token id"),
        ({"eot_token_id": "abc"}, "tokenizer.ggml.eot_token_id='abc' is not a token id"),
        ({"bos_token_id": 1.5}, "tokenizer.ggml.bos_token_id=1.5 is not a token id"),
        ({"eos_token_id": True}, "tokenizer.ggml.eos_token_id=True is not a token id"),
        # an array key holding a scalar or an array of the wrong type (a crafted file; the fuzzing of
        # session 19 found each a TypeError / ValueError that check_model, `strata models` and the
        # installer passed on unexplained)
        ({"token_type": 5}, "tokenizer.ggml.token_type is not an array of integers (it is an int)"),
        ({"token_type": [1.5] * 49152}, "tokenizer.ggml.token_type is not an array of integers (an element is a float)"),
        ({"token_type": [True] * 49152}, "tokenizer.ggml.token_type is not an array of integers (an element is a bool)"),
        ({"merges": 7}, "tokenizer.ggml.merges is not an array of strings (it is an int)"),
        ({"merges": False}, "tokenizer.ggml.merges is not an array of strings (it is a bool)"),
        ({"merges": [[1], [2]]}, "tokenizer.ggml.merges is not an array of strings (an element is a list)"),
        ({"tokens": 3.5}, "tokenizer.ggml.tokens is not an array of strings (it is a float)"),
        ({"tokens": list(range(10))}, "tokenizer.ggml.tokens is not an array of strings (an element is an int)"),
        ({"model": "llama", "scores": "abc"}, "tokenizer.ggml.scores is not an array of numbers (it is a str)"),
        ({"model": "llama", "scores": ["x"] * 49152}, "tokenizer.ggml.scores is not an array of numbers (an element is a str)"),
        ({"model": 7}, "unsupported tokenizer model 7"),
    ],
)
def test_bad_metadata_is_a_clear_error(default_metadata, changes, message):
    with pytest.raises(TokenizerError, match=re.escape(message)):
        Tokenizer.from_metadata(_with(default_metadata, **changes))


def test_missing_pre_means_default(default_metadata):
    tok = Tokenizer.from_metadata(_with(default_metadata, pre=None))
    assert tok.pre == "default"


def test_tiny_fixture_vocabulary(tiny_model_factory):
    from strata.engine import GGUFFile

    path = tiny_model_factory(n_layer=1, n_embd=64, n_head=2, n_head_kv=1, n_ff=128, n_vocab=512,
                              dtype="F32", seed=0)
    tok = Tokenizer.from_metadata(GGUFFile(path).metadata)
    text = "<|im_start|>user\nhello world<|im_end|>\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.token_id("<|im_start|>") in ids and tok.token_id("<|im_start|>") in tok.message_opener_ids
    assert tok.token_id("<|im_end|>") in tok.eot_ids


def test_user_defined_tokens_are_parsed_even_without_special(default_metadata):
    types = list(default_metadata["tokenizer.ggml.token_type"])
    types[5] = 4  # <file_sep> as USER_DEFINED
    tok = Tokenizer.from_metadata(_with(default_metadata, token_type=types))
    assert 5 in tok.encode("a<file_sep>b", special=False)
    assert 5 in tok.encode("a<file_sep>b", special=True)
    assert 1 not in tok.encode("a<|im_start|>b", special=False)  # CONTROL stays text
    assert 5 not in tok.special_ids


@pytest.mark.parametrize("pre", ["glm4", "glm5", "chatglm-bpe"])
def test_glm_vocabularies_cut_as_llama3_and_add_no_bos(default_metadata, pre):
    """llama.cpp's LLAMA_VOCAB_PRE_TYPE_CHATGLM4: llama 3's regex, no BOS unless the file asks (GLM's
    templates write "[gMASK]<sop>" themselves); "glm4" / "glm5" ignore merges, "chatglm-bpe" does not."""
    tok = Tokenizer.from_metadata(_with(default_metadata, pre=pre, add_bos_token=None))
    assert tok.pre_tokenize("x 12345!\n\n  ok") == ["x", " ", "123", "45", "!\n\n", " ", " ok"]
    assert tok.add_bos is False and tok.encode("hi")[:1] != [tok.bos_id]
    assert PRE_TOKENIZERS[pre][1] is (pre != "chatglm-bpe")


def test_end_of_message_token_ends_generation(default_metadata):
    """GLM's files name "<|observation|>" as tokenizer.ggml.eom_token_id (the model waits for a tool's
    result) and "<|user|>" as eot: both end generation, as in llama.cpp."""
    plain = Tokenizer.from_metadata(default_metadata)
    tok = Tokenizer.from_metadata(_with(default_metadata, eom_token_id=5, eot_token_id=6))
    assert tok.eot_ids == plain.eot_ids | {5, 6}
    with pytest.raises(TokenizerError, match="eom_token_id=99999 is outside"):
        Tokenizer.from_metadata(_with(default_metadata, eom_token_id=99999))
