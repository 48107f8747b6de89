"""The JSON answer automaton (strata.engine.json_grammar): which byte strings it accepts as a whole value,
as a prefix, or refuses; which schemas it refuses by name; and the sampler held to it over the default
model's real vocabulary, drawing from random logits, always ends with JSON that its schema accepts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_grammar import complete
from strata.engine.json_schema import ANY_OBJECT, SchemaError, compile_schema
from strata.engine.sampling import Sampler, SamplingParams
from strata.engine.token_bytes import Vocabulary

from tests.text.json_verdict import verdict

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"},
                         "tags": {"type": "array", "items": {"enum": ["x", "yy"]}, "maxItems": 3},
                         "nick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                         "ok": {"type": "boolean"}, "score": {"type": "number"}}}




@pytest.mark.parametrize("text, want", [
    ('{"a": [1, -2.5e-3, "x\\u00e9\\n", true, null, {"b": {}}], "c": -0}', "whole"),
    ('{ "k" : "v" }', "whole"),
    ('{"a": 01}', "refused"),          # no leading zeros
    ('[1]', "refused"),                # json_object: an object at the top
    ('{"a": tru', "prefix"),
    ('{"a": "line\nbreak"}', "refused"),   # control characters must be escaped
    ('{"a": 1,}', "refused"),
    ('{"a" 1}', "refused"),
    ('{"a": 1}x', "refused"),
    ('{"a": "\\q"}', "refused"),
    ('{"a": 1.}', "refused"),
])
def test_any_object(text, want):
    assert verdict(ANY_OBJECT, text) == want


@pytest.mark.parametrize("text, want", [
    ('{\n  "a": [\n    1,\n    2\n  ],\r\n\t"b": {}\n}', "whole"),    # pretty-printed: a break and its indent
    ('{"a" : 1 ,\t"b": 2}', "whole"),
    ('{' + ' ' + '\n' + ' ' * 20 + '"a": 1}', "whole"),             # the most a gap holds
    ('{\n\n"a": 1}', "refused"),                  # a blank line: one break a gap (before: 24 of them)
    ('{"a":\n \n 1}', "refused"),
    ('{"a":  1}', "refused"),                      # 2 blanks before a break
    ('{\n' + ' ' * 21 + '"a": 1}', "refused"),     # 21 after it
    ('{\r "a": 1}', "refused"),                    # \r only as \r\n
    ('{"a": 1\n}\n', "refused"),                  # nothing after the whole value
])
def test_whitespace_gaps(text, want):
    """A gap between tokens holds at most one line break, 1 blank before it and 20 after (ws_step); the sampler's
    byte hints (json_next_bytes) offer exactly those whitespace bytes."""
    assert verdict(ANY_OBJECT, text) == want


def test_next_bytes_offers_the_gaps_whitespace():
    from strata.engine.json_grammar import step
    from strata.engine.json_next_bytes import next_bytes

    state = ((("V", ANY_OBJECT),), 0)
    for b in b'{"a":':
        state = step(state, b)
    for text in (b"", b" ", b"\t", b"\n", b"\r", b"\n" + b" " * 20, b" \n\t"):
        s = state
        for b in text:
            s = step(s, b)
        offered = {b for b in next_bytes(s) if b in b" \t\r\n"}
        taken = {b for b in b" \t\r\n" if step(s, b) is not None}
        assert offered == taken, (text, offered, taken)


@pytest.mark.parametrize("text, want", [
    ('{"name": "bob", "age": 3}', "whole"),
    ('{"age": 3, "name": "bob", "tags": ["yy", "x"], "nick": null, "ok": false, "score": 1e9}', "whole"),
    ('{"name": "b", "age": 1, "nick": "z"}', "whole"),
    ('{"age": 3}', "refused"),                       # "name" is required
    ('{"name": "bobby-bobby"}', "refused"),          # maxLength 8
    ('{"name": "b", "age": 3.5}', "refused"),        # an integer
    ('{"name": "b", "agex": 1}', "refused"),         # no additional properties
    ('{"name": "b", "name": "c"}', "refused"),       # a key twice
    ('{"name": "b", "age": 1, "tags": ["z"]}', "refused"),
    ('{"name": "b", "age": 1, "tags": ["x", "x", "x", "x"]}', "refused"),   # maxItems 3
    ('{"name": "b", "age": 12', "prefix"),
])
def test_schema(text, want):
    assert verdict(compile_schema(PERSON), text) == want


@pytest.mark.parametrize("raw, want", [
    ('{"a": "é€😀"}'.encode(), "whole"),
    (b'{"a": "\xff"}', "refused"),              # never a UTF-8 byte
    (b'{"a": "\xc3"}', "refused"),              # a character cut by the closing quote
    (b'{"a": "\xed\xa0\x80"}', "refused"),      # a surrogate
    (b'{"a": "\xe0\x80\x80"}', "refused"),      # an overlong form
    (b'{"\xc3\xa9": 1}', "whole"),             # keys too
])
def test_strings_are_utf8(raw, want):
    assert verdict(ANY_OBJECT, raw) == want
    if want == "whole":
        json.loads(raw)


def test_recursive_ref_and_unions():
    node = compile_schema({"$defs": {"n": {"type": "object", "additionalProperties": False, "required": ["v", "next"],
                                           "properties": {"v": {"type": ["integer", "string"]},
                                                          "next": {"anyOf": [{"$ref": "#/$defs/n"}, {"type": "null"}]}}}},
                           "$ref": "#/$defs/n"})
    assert verdict(node, '{"v": 1, "next": {"v": "two", "next": null}}') == "whole"
    assert verdict(node, '{"v": 1, "next": {"v": true') == "refused"


@pytest.mark.parametrize("schema, words", [
    ({"type": "integer", "multipleOf": 3}, "schema.multipleOf is not supported"),
    ({"type": "object", "properties": {"n": {"allOf": [{"type": "integer"}]}}}, "schema.properties.n.allOf"),
    ({"$defs": {"u": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/u"}},
                                {"type": "array", "items": {"$ref": "#/$defs/v"}}]},
                "v": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/u"}},
                                {"type": "array", "items": {"$ref": "#/$defs/v"}}]}},
      "$ref": "#/$defs/u"}, "can each hold this union again"),
    ({"$ref": "#/$defs/missing"}, "names no definition"),
    ({"type": "date"}, "'date' is not a JSON Schema type"),
    ({"enum": []}, "an empty enum"),
    ({"type": "array", "maxItems": -1}, "maxItems must be a non-negative integer"),
])
def test_refused_schemas_name_the_keyword(schema, words):
    with pytest.raises(SchemaError, match=words.replace("(", r"\(").replace(".", r"\.")):
        compile_schema(schema)


def answer(sampler: Sampler, vocab: Vocabulary, eos: int, rng, steps: int = 400) -> bytes:
    out = b""
    for _ in range(steps):
        logits = rng.normal(0, 3, vocab.n).astype(np.float32)
        logits[eos] += 4.0            # the model would end early: only a whole value lets it
        t = sampler.sample(logits)
        if t == eos:
            return out
        out += vocab.bytes[t]
    raise AssertionError(f"no end after {steps} tokens: {out[:200]!r}")


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_sampler_held_to_the_schema_on_the_real_vocabulary(smollm_tokenizer, temperature):
    vocab = Vocabulary.of(smollm_tokenizer)
    eos = smollm_tokenizer.eos_id
    schema = {"type": "object", "additionalProperties": False, "required": ["ok", "kind", "n"],
              "properties": {"ok": {"type": "boolean"}, "kind": {"enum": ["cat", "dog"]},
                             "n": {"type": "integer"}, "why": {"type": "string", "maxLength": 12}}}
    rng = np.random.default_rng(7)
    for seed in range(4):
        c = JsonConstraint(compile_schema(schema), vocab, [eos])
        s = Sampler(SamplingParams(temperature=temperature, seed=seed, top_k=40), vocab.n, constraint=c)
        value = json.loads(answer(s, vocab, eos, rng))
        assert set(value) >= {"ok", "kind", "n"} and set(value) <= {"ok", "kind", "n", "why"}
        assert isinstance(value["ok"], bool) and value["kind"] in ("cat", "dog") and type(value["n"]) is int


def test_unconstrained_sampler_is_unchanged(smollm_tokenizer):
    """The constraint hook leaves plain sampling as it was: the same tokens for the same seed."""
    rng = np.random.default_rng(1)
    rows = rng.normal(0, 2, (20, smollm_tokenizer.n_vocab)).astype(np.float32)
    a = Sampler(SamplingParams(temperature=0.7, seed=5, top_p=0.9))
    b = Sampler(SamplingParams(temperature=0.7, seed=5, top_p=0.9), constraint=None)
    assert [a.sample(r) for r in rows] == [b.sample(r) for r in rows]


def test_free_until_the_reasoning_closes(smollm_tokenizer):
    vocab = Vocabulary.of(smollm_tokenizer)
    c = JsonConstraint(ANY_OBJECT, vocab, [smollm_tokenizer.eos_id], after=b"</think>")
    for t in smollm_tokenizer.encode("I think so.</think>", add_bos=False):
        assert c.allows(t)
        c.advance(t)
    assert c.active and not c.allows(smollm_tokenizer.encode("Hi", add_bos=False)[0])
    brace = smollm_tokenizer.encode("{", add_bos=False)[0]
    assert c.allows(brace)


def test_a_lead_comes_before_the_value():
    from strata.engine.json_constraint import JsonConstraint as C

    c = C(compile_schema({"type": "object", "properties": {"a": {"type": "integer"}}}), Vocabulary([]), (),
          lead=b"<tool_call>")
    with pytest.raises(ValueError):
        C(ANY_OBJECT, Vocabulary([]), (), lead=b"<tool_call>").feed(b'{"a": 1}')
    c.feed(b'<tool_call>\n{"a": 1}')
    assert complete(c.state)


def test_closed_objects_take_only_their_properties():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    assert verdict(compile_schema(schema, closed=False), '{"city": "Oslo", "unit": "C"}') == "whole"   # JSON Schema's
    assert verdict(compile_schema(schema), '{"city": "Oslo", "unit": "C"}') == "refused"    # the default, as llama.cpp
    assert verdict(compile_schema(dict(schema, additionalProperties=True)), '{"city": "Oslo", "unit": "C"}') == "whole"
    assert verdict(compile_schema({"type": "object"}, closed=True), '{"any": 1}') == "whole"   # lists nothing


def test_forced_start_spells_its_text_then_frees(smollm_tokenizer):
    from strata.engine.forced_start import ForcedStart

    vocab = Vocabulary.of(smollm_tokenizer)
    f = ForcedStart([b"[TOOL_CALLS]"], vocab)
    rng = np.random.default_rng(3)
    s = Sampler(SamplingParams(temperature=1.0, seed=2), vocab.n, constraint=f)
    out = b""
    while f.active:
        out += vocab.bytes[s.sample(rng.normal(0, 3, vocab.n).astype(np.float32))]
    assert out[:12] == b"[TOOL_CALLS]"
    assert f.allows(smollm_tokenizer.encode("Hello", add_bos=False)[0])    # free afterwards


def test_forced_start_keeps_the_starts_still_possible(smollm_tokenizer):
    from strata.engine.forced_start import ForcedStart

    vocab = Vocabulary.of(smollm_tokenizer)
    f = ForcedStart([b"<tool_call>\n<function=get_weather", b"<tool_call>\n<function=get_time"], vocab)
    for t in smollm_tokenizer.encode("<tool_call>\n<function=get_", add_bos=False):
        assert f.allows(t)
        f.advance(t)
    assert not f.allows(smollm_tokenizer.encode("x", add_bos=False)[0])
    assert f.allows(smollm_tokenizer.encode("t", add_bos=False)[0]) and f.allows(smollm_tokenizer.encode("w", add_bos=False)[0])
    for t in smollm_tokenizer.encode("time", add_bos=False):
        f.advance(t)
    assert not f.active


def test_a_held_draw_follows_p_given_allowed():
    """The sampler's redraws (refused tokens banned, drawn again) give each allowed token its probability
    renormalized over the allowed ones: 20,000 first tokens against that law."""
    from strata.engine.forced_start import ForcedStart

    vocab = Vocabulary([b"a", b"b", b"c", b"ab", b"ac", b"x", b"yy"])
    logits = np.array([0.5, 2.0, 1.0, -0.3, 0.8, 2.5, 1.5], dtype=np.float32)
    allowed = [0, 3, 4]                                  # "a", "ab", "ac" agree with "ab" / "ac"
    p = np.exp(logits[allowed]) / np.exp(logits[allowed]).sum()
    s = Sampler(SamplingParams(temperature=1.0, seed=11), vocab.n)
    counts = np.zeros(vocab.n)
    for _ in range(20_000):
        s.constraint = ForcedStart([b"ab", b"ac"], vocab)
        counts[s.sample(logits)] += 1
    assert counts[[1, 2, 5, 6]].sum() == 0
    assert np.abs(counts[allowed] / 20_000 - p).max() < 0.015, (counts[allowed] / 20_000, p)
