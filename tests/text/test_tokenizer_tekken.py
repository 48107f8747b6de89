"""Mistral's tekken vocabulary (tokenizer.ggml.pre = "tekken"): our tokenizer, built from the GGUF metadata
llama.cpp's converter writes (gguf-py MistralVocab), gives mistral-common's Tekkenizer ids on a corpus of
code, prose in many scripts, digits, whitespace runs, CRLF, emoji and combining marks; the control tokens
([TOOL_CALLS], [ARGS], [THINK], ...) are single tokens in rendered prompts, text when not parsed, and decode
to their text (the answer readers see them). Needs mistral-common (dev extra)."""

from __future__ import annotations

import pytest

pytest.importorskip("mistral_common")

from strata.engine.tokenizer import TOKEN_CONTROL, Tokenizer  # noqa: E402

from tests.fixtures.tekken_vocab import (  # noqa: E402
    CORPUS,
    V13_SPECIALS,
    random_texts,
    tekken_json_pattern,
    tekken_metadata,
    tekkenizer,
)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_metadata(tekken_metadata())


@pytest.fixture(scope="module")
def reference():
    return tekkenizer()


@pytest.mark.parametrize("text", CORPUS)
def test_ids_match_mistral_common(tok, reference, text):
    # Tekkenizer.encode never parses special tokens: our plain (special=False) encoding, BOS first
    assert tok.encode(text, special=False) == reference.encode(text, bos=True, eos=False)


def test_random_texts_match_mistral_common(tok, reference):
    """Seeded random mixes of the characters that split differently in each pre-tokenizer (cases, digits,
    marks, punctuation, whitespace kinds, apostrophes, several scripts)."""
    for text in random_texts(300, seed=1234):
        assert tok.encode(text, special=False) == reference.encode(text, bos=True, eos=False), repr(text)


def test_pieces_are_the_tokenizer_json_regex(tok):
    """The pre-tokenizer cuts text where the regex of tekken's own file does (digits one by one, no
    contractions: pieces the vocabulary alone would not tell apart from o200k's)."""
    import regex

    pattern = regex.compile(tekken_json_pattern())
    for text in CORPUS + ["I'm don't they'll 12345 Don'T", "x\u0301Y ŁÓDŹ łódź 2024"]:
        assert tok.pre_tokenize(text) == pattern.findall(text), repr(text)


def test_vocabulary_shape(tok):
    md = tekken_metadata()
    assert tok.n_vocab == 131072 and tok.pre == "tekken"
    assert tok.bos_id == 1 and tok.eos_id == 2 and tok.add_bos
    assert tok.eot_ids == frozenset({2})
    # the conversation cache's segment anchors: user turns and tool results
    assert tok.message_opener_ids == [tok.token_id("[INST]"), tok.token_id("[TOOL_RESULTS]")]
    assert all(t == TOKEN_CONTROL for t in md["tokenizer.ggml.token_type"][:1000])


@pytest.mark.parametrize("marker", ("[TOOL_CALLS]", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                                    "[SYSTEM_PROMPT]", *V13_SPECIALS))
def test_control_tokens_are_single_tokens_in_prompts(tok, reference, marker):
    ids = tok.encode(f"a{marker}b", special=True, add_bos=False)
    assert ids == [reference.encode("a", bos=False, eos=False)[0], reference.get_special_token(marker),
                   reference.encode("b", bos=False, eos=False)[0]]
    # not parsed: plain text, as mistral-common encodes it
    assert tok.encode(marker, special=False, add_bos=False) == reference.encode(marker, bos=False, eos=False)


def test_answer_markup_decodes_to_its_text(tok, reference):
    # what the model writes for a call after thinking: its control tokens reach the answer readers as text
    ids = [reference.get_special_token("[THINK]"), *reference.encode("hmm", bos=False, eos=False),
           reference.get_special_token("[/THINK]"), reference.get_special_token("[TOOL_CALLS]"),
           *reference.encode("ls", bos=False, eos=False), reference.get_special_token("[ARGS]"),
           *reference.encode('{"path": "."}', bos=False, eos=False)]
    assert tok.decode(ids) == '[THINK]hmm[/THINK][TOOL_CALLS]ls[ARGS]{"path": "."}'


def test_rendered_prompt_is_mistral_commons(tok, reference):
    """A prompt as Mistral's templates write it: control tokens parsed, the text between them as
    mistral-common encodes it, BOS once (the template writes it)."""
    parts = [("<s>", None), ("[SYSTEM_PROMPT]", None), ("You are terse.", "t"), ("[/SYSTEM_PROMPT]", None),
             ("[INST]", None), ("List the files.", "t"), ("[/INST]", None), ("[TOOL_CALLS]", None),
             ("ls", "t"), ("[ARGS]", None), ('{"path": "."}', "t"), ("</s>", None),
             ("[TOOL_RESULTS]", None), ("a.py\nb.py", "t"), ("[/TOOL_RESULTS]", None)]
    want = []
    for text, kind in parts:
        want += reference.encode(text, bos=False, eos=False) if kind else [reference.get_special_token(text)]
    assert tok.encode("".join(t for t, _ in parts), special=True) == want


def test_round_trip(tok):
    for text in CORPUS:
        assert tok.decode(tok.encode(text, special=False, add_bos=False)) == text
