"""canonical_split: a held answer's forced text written in the tokenizer's own split, on the default model's
real vocabulary (SmolLM2's byte-level BPE, its markup tokens)."""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine.canonical_split import CanonicalSplit, canonical_plan
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_schema import compile_call
from strata.engine.sampling import Sampler, SamplingParams
from strata.engine.token_bytes import Vocabulary

CLOSE = b"\n</tool_call>"


def texts(tok, ids) -> list[str]:
    return [tok.token_bytes(i).decode() for i in ids]


def test_the_plan_is_the_tokenizers_split_up_to_the_last_piece(smollm_tokenizer):
    tok = smollm_tokenizer
    plan = canonical_plan(tok, b"", b'{"name": "get_weather')
    assert texts(tok, plan) == ['{"', "name", '":', ' "', "get", "_"]      # "weather" could still grow
    assert plan == tok.encode('{"name": "get_', add_bos=False)


def test_no_plan_where_the_answer_so_far_ends_inside_one_of_the_tokenizers_tokens(smollm_tokenizer):
    assert canonical_plan(smollm_tokenizer, b'{"na', b'me": "x') == []           # the tokenizer writes "name"
    assert texts(smollm_tokenizer, canonical_plan(smollm_tokenizer, b'{"', b'name": "x')) == ["name", '":', ' "']


def test_the_plan_stops_where_a_markup_token_could_begin(smollm_tokenizer):
    tok = smollm_tokenizer
    assert texts(tok, canonical_plan(tok, b"", b"ok then<|im_")) == ["ok", " then"]   # not "<|" "im": <|im_end|>?
    assert texts(tok, canonical_plan(tok, b"", b"ok<|im_end|>\n")) == ["ok", "<|im_end|>"]


def short_first(vocab: Vocabulary) -> np.ndarray:
    """A model that likes short tokens best: held to a text, it writes it a byte at a time."""
    return -np.array([len(b) if b else 99 for b in vocab.bytes], dtype=np.float32)


def write_call(tok, canonical: bool) -> tuple[list[int], bytes]:
    """A demanded call whose whole text is fixed (one tool, a const argument), written greedily by a model
    that likes short tokens: (tokens, text)."""
    vocab = Vocabulary.of(tok)
    args = {"type": "object", "properties": {"unit": {"const": "celsius"}}, "required": ["unit"]}
    held = JsonConstraint(compile_call([("get_weather", args)]), vocab, [tok.eos_id], lead=b"<tool_call>\n",
                          close=CLOSE, spacing=(b", ", b": "))
    sampler = Sampler(SamplingParams(), vocab.n, constraint=CanonicalSplit(held, tok) if canonical else held)
    logits, ids = short_first(vocab), []
    while (t := sampler.sample(logits)) != tok.eos_id and len(ids) < 200:
        ids.append(t)
    return ids, b"".join(vocab.bytes[i] for i in ids)


def test_a_fixed_call_is_written_as_the_next_turn_reads_it(smollm_tokenizer):
    tok = smollm_tokenizer
    ids, text = write_call(tok, canonical=True)
    assert text == b'<tool_call>\n{"name": "get_weather", "arguments": {"unit": "celsius"}}' + CLOSE
    assert ids == tok.encode(text.decode(), add_bos=False)
    plain, same = write_call(tok, canonical=False)       # held alone, the same text a byte at a time
    assert same == text and len(plain) == len(text)


def test_the_split_holds_after_a_long_line_of_non_ascii_text(smollm_tokenizer):
    """A JSON call is one line: after an argument of 300 bytes of Chinese the split is read from a tail cut
    inside a character, which must start at one (before: the rest of the call a byte at a time)."""
    tok = smollm_tokenizer
    vocab = Vocabulary.of(tok)
    args = {"type": "object", "properties": {"content": {"type": "string"}, "path": {"const": "notes.txt"}},
            "required": ["content", "path"]}
    c = CanonicalSplit(JsonConstraint(compile_call([("write", args)]), vocab, [tok.eos_id], lead=b"<tool_call>\n",
                                      close=CLOSE, spacing=(b", ", b": ")), tok)
    ids = tok.encode('<tool_call>\n{"name": "write", "arguments": {"content": "' + "中" * 100 + '",', add_bos=False)
    for t in ids:
        c.advance(t)
    sampler = Sampler(SamplingParams(), vocab.n, constraint=c)
    while (t := sampler.sample(short_first(vocab))) != tok.eos_id:
        ids.append(t)
        assert len(ids) < 400
    text = b"".join(vocab.bytes[i] for i in ids).decode()
    assert text.endswith('中", "path": "notes.txt"}}' + CLOSE.decode())
    assert ids == tok.encode(text, add_bos=False)


def test_a_free_token_running_into_forced_text_is_cut_as_the_tokenizer_cuts(smollm_tokenizer):
    tok = smollm_tokenizer
    vocab = Vocabulary.of(tok)
    args = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    c = CanonicalSplit(JsonConstraint(compile_call([("get_weather", args)]), vocab, [tok.eos_id], lead=b"<tool_call>\n",
                                      close=CLOSE, spacing=(b", ", b": ")), tok)
    for t in tok.encode('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris', add_bos=False):
        c.advance(t)
    quote_brace, quote = tok.token_id('"}'), tok.token_id('"')
    assert c.allows(quote_brace) and c.forced_bytes(b'"}') == b"}" + CLOSE
    assert c.resplit(quote_brace) == quote          # the tokenizer writes '"' '}}' here
    assert c.resplit(quote) == quote
    assert c.resplit(tok.encode(" and", add_bos=False)[0]) == tok.encode(" and", add_bos=False)[0]   # no forced text
    c.advance(quote)
    assert texts(tok, [c.forced_token()]) == ["}}"]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_sampled_call_is_still_a_call_of_the_tool(smollm_tokenizer, temperature):
    """Random logits: the forced parts are the tokenizer's, the rest the model's, the call whole."""
    import json

    tok = smollm_tokenizer
    vocab = Vocabulary.of(tok)
    args = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
    held = JsonConstraint(compile_call([("get_weather", args), ("get_time", None)]), vocab, [tok.eos_id],
                          lead=b"<tool_call>\n", close=CLOSE, spacing=(b", ", b": "))
    sampler = Sampler(SamplingParams(temperature=temperature, seed=3), vocab.n, constraint=CanonicalSplit(held, tok))
    rng = np.random.default_rng(5)
    ids = []
    while (t := sampler.sample(rng.standard_normal(vocab.n).astype(np.float32) * 3)) != tok.eos_id:
        ids.append(t)
        assert len(ids) < 400
    text = b"".join(vocab.bytes[i] for i in ids).decode()
    assert text.startswith("<tool_call>\n") and text.endswith(CLOSE.decode())
    call = json.loads(text[len("<tool_call>\n"):-len(CLOSE)])
    assert call["name"] in ("get_weather", "get_time")
    assert ids[:11] == tok.encode('<tool_call>\n{"name": "get', add_bos=False)   # as the tokenizer cuts it


def test_the_last_piece_is_planned_when_no_byte_that_may_follow_can_grow_it(smollm_tokenizer):
    tok = smollm_tokenizer
    before = b'<tool_call>\n{"name": "read_file", "arguments":'
    assert canonical_plan(tok, before, b' {"') == []                       # `"` could be `"_`: not certain
    assert texts(tok, canonical_plan(tok, before, b' {"', frozenset(b"pl"))) == [' {"']    # a key's letter
    assert canonical_plan(tok, before, b' {"', frozenset(b"p_")) == []      # `_` joins the piece
    assert canonical_plan(tok, before, b' {"', frozenset()) == []           # nothing known: as before
    assert texts(tok, canonical_plan(tok, b'{"a": 1,', b' "', frozenset(b"b"))) == [' "']
    assert canonical_plan(tok, b'{"a":', b' ', frozenset(b'"')) == []      # the space joins the next piece


def test_a_call_whose_first_key_is_the_models_choice_opens_its_arguments_as_the_tokenizer_does(smollm_tokenizer):
    """The arguments' ` {"` is forced but the key after it is not (two parameters): the model was free to
    write ` {` `"`, which the next turn, rendering the call back, reads as ` {"` and so read the rest of the
    call again (15-22 tokens a call in a live trial). Every key starts with a letter, so the piece is whole."""
    tok = smollm_tokenizer
    vocab = Vocabulary.of(tok)
    args = {"type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"]}
    held = JsonConstraint(compile_call([("read_file", args)]), vocab, [tok.eos_id], lead=b"<tool_call>\n",
                          close=CLOSE, spacing=(b", ", b": "))
    c = CanonicalSplit(held, tok)
    for t in tok.encode('<tool_call>\n{"name": "read_file", "arguments":', add_bos=False):
        c.advance(t)
    assert held.bytes_after(b' {"') == frozenset(b"pl")
    assert texts(tok, c.upcoming()) == [' {"']
    sampler = Sampler(SamplingParams(), vocab.n, constraint=c)
    assert texts(tok, [sampler.sample(short_first(vocab))]) == [' {"']      # not ` {` though it is shorter


def test_a_nested_object_with_no_required_key_opens_as_the_tokenizer_writes_it(smollm_tokenizer):
    """A Task call's `options` (and its `limits`) has no required key: ` {` is forced and `"` (a key) or `}`
    is the model's choice, so the piece was left to the model, which wrote ` {` `"`; the next turn reads
    ` {"` and read the rest of the call again (39 tokens a turn in a multi-agent trial). ` {` alone is
    refused there: the tokenizer joins it with either byte."""
    tok = smollm_tokenizer
    vocab = Vocabulary.of(tok)
    options = {"type": "object", "properties": {"model": {"enum": ["sonnet", "opus"]}, "turns": {"const": 10}}}
    args = {"type": "object", "properties": {"options": options}, "required": ["options"]}
    held = JsonConstraint(compile_call([("task", args)]), vocab, [tok.eos_id], lead=b"<tool_call>\n",
                          close=CLOSE, spacing=(b", ", b": "))
    c = CanonicalSplit(held, tok)
    ids = tok.encode('<tool_call>\n{"name": "task", "arguments": {"options":', add_bos=False)
    for t in ids:
        c.advance(t)
    assert c.forced_token() is None and held.forced_bytes() == b" {"           # the model's choice after it
    lone, space = tok.encode(" {", add_bos=False), tok.encode(" ", add_bos=False)
    assert len(lone) == 1 and held.allows(lone[0]) and held.allows(space[0])
    assert not c.allows(lone[0]) and not c.allows(space[0])
    sampler = Sampler(SamplingParams(), vocab.n, constraint=c)
    logits = short_first(vocab)
    logits[lone[0]] = 10.0                                                     # the model's favourite,
    logits[tok.token_id('Ġ{"')] = 5.0                                          # then the key's opening
    first = sampler.sample(logits)
    assert texts(tok, [first]) == [' {"']
    ids.append(first)
    text = b"".join(vocab.bytes[i] for i in ids).decode() + 'model": "sonnet"}}}'
    assert tok.encode(text, add_bos=False)[:len(ids)] == ids                  # as the next turn reads it
    c.advance(tok.encode("model", add_bos=False)[0])
    assert c.allows(tok.token_id('":'))                                        # a later state: as before
