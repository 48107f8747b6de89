"""Numbers held to minimum / maximum and strings held to a pattern or format while an answer is written
(json_numbers.py, json_patterns.py through json_grammar.py), and tool parameters compiled leniently."""

from __future__ import annotations

import json
import random
import re
from fractions import Fraction

import numpy as np
import pytest
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_grammar import complete, step
from strata.engine.json_patterns import FORMATS, PatternError, compile_pattern
from strata.engine.json_schema import SchemaError, compile_call, compile_schema
from strata.engine.sampling import Sampler, SamplingParams
from strata.engine.token_bytes import Vocabulary

from tests.text.json_verdict import verdict


def walk_never_stuck(node, rng: random.Random, walks: int, max_bytes: int, alphabet=range(256)) -> list[bytes]:
    """Random byte walks through the automaton: some byte (or the end) is always allowed. The finished
    values."""
    done = []
    for _ in range(walks):
        state, out = ((("V", node),), 0), b""
        for _ in range(max_bytes):
            options = [c for c in alphabet if step(state, c) is not None]
            if complete(state) and (not options or rng.random() < 0.15):
                done.append(out)
                break
            assert options, f"a dead end after {out!r}"
            c = rng.choice(options)
            state, out = step(state, c), out + bytes([c])
    return done


BOUNDED = [
    {"type": "integer", "minimum": 5, "maximum": 12},
    {"type": "integer", "exclusiveMinimum": -3, "exclusiveMaximum": 4},
    {"type": "number", "minimum": 0, "maximum": 1},
    {"type": "number", "exclusiveMinimum": 0, "maximum": 0.25},
    {"type": "number", "minimum": -2.5, "exclusiveMaximum": -1.25},
    {"type": "integer", "minimum": 100},
    {"type": "number", "maximum": -7},
    {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 3},     # draft 4
    {"type": "number", "minimum": 0.333, "maximum": 0.334},
]


@pytest.mark.parametrize("schema", BOUNDED)
def test_bounded_numbers_take_exactly_their_range(schema):
    node = compile_schema(schema)
    rng = random.Random(1)
    fixed = ["0", "-0", "0.0", "1", "12", "5", "4.5", "0.25", "0.2500", "-1.25", "-2.5", "100", "1000", "0.333",
             "0.3335", "0.334", "-7", "-7.5", "3", "4", "-2", "1e1"]
    texts = fixed + [str(rng.randint(-200, 200)) for _ in range(300)] + \
        [f"{rng.uniform(-5, 5):.{rng.randint(1, 4)}f}" for _ in range(300)]
    for t in texts:
        value = json.loads(t)
        integer_ok = schema["type"] == "number" or isinstance(value, int)
        want = integer_ok and "e" not in t and node.bounds.holds(Fraction(t))
        assert (verdict(node, t) == "whole") == want, (schema, t)


@pytest.mark.parametrize("schema", BOUNDED)
def test_bounded_numbers_never_lead_into_a_dead_end(schema):
    node = compile_schema(schema)
    for text in walk_never_stuck(node, random.Random(2), 150, 30, alphabet=b"-0123456789.eE"):
        assert node.bounds.holds(Fraction(text.decode()))


def test_bounds_inside_objects_end_at_the_next_byte():
    node = compile_schema({"type": "object", "properties": {"p": {"type": "integer", "minimum": 1, "maximum": 5}},
                           "required": ["p"], "additionalProperties": False})
    assert verdict(node, '{"p": 5}') == "whole"
    assert verdict(node, '{"p": 6}') == "refused"
    assert verdict(node, '{"p": 0}') == "refused"
    assert verdict(node, '{"p": 1') == "prefix"


def test_a_required_key_the_properties_do_not_list_takes_any_value():
    """Closed by default (properties listed, additionalProperties unsaid), 'b' required but not listed could never
    be written: the answer found no token to go on with at its end (found by tests/server/body_fuzz.py)."""
    node = compile_schema({"type": "object", "properties": {"a": {"enum": ["x"]}}, "required": ["a", "b"]})
    assert verdict(node, '{"a": "x", "b": [1, {"c": null}]}') == "whole"
    assert verdict(node, '{"a": "x"}') == "refused"
    assert verdict(node, '{"a": "x", "c": 1}') == "refused"       # still closed to keys neither listed nor required
    with pytest.raises(SchemaError, match="required names 'b', which is not in properties"):
        compile_schema({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": False})


@pytest.mark.parametrize("schema, words", [
    ({"type": "integer", "minimum": 3, "maximum": 2.5}, "allow no integer"),
    ({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 3}, "allow no integer"),
    ({"type": "number", "minimum": 1, "exclusiveMaximum": 1}, "allow no number"),
    ({"type": "integer", "minimum": 1e30}, "of at most 24 characters"),
    ({"type": "number", "maximum": "10"}, "schema.maximum must be a finite number"),
    ({"minimum": 0}, "need \"type\""),
    ({"type": "string", "pattern": "(?=a)b"}, "schema.pattern: a look-around"),
    ({"type": "string", "pattern": "\\1"}, "back-references"),
    ({"type": "string", "format": "ipv6"}, "the format 'ipv6' is not supported"),
    ({"type": "string", "pattern": "^a+$", "maxLength": 3}, "write it all into one pattern"),
    ({"type": "string", "pattern": "^\u0001$"}, "matches no string an answer can write"),
    # found by tests/server/body_fuzz.py: the answer found no token to go on with mid-value (a failed step, a 500)
    ({"type": "string", "minLength": 5, "maxLength": 2}, "schema: minLength / maxLength allow no string (5 > 2)"),
    ({"type": "object", "properties": {"a": {"type": "array", "minItems": 2, "maxItems": 1}}},
     "schema.properties.a: minItems / maxItems allow no array (2 > 1)"),
])
def test_unholdable_bounds_and_patterns_are_refused_by_name(schema, words):
    with pytest.raises(SchemaError, match=re.escape(words)):
        compile_schema(schema)


PATTERNS = [r"^[a-z]+$", r"^\d{3}-\d{4}$", r"ab|cd", r"^(foo|bar)+baz?$", r"^[^\"\\]{2,5}$", r"^x*$",
            r"^[A-Z][a-z]{0,3}(?:-[0-9]+)?$", r"^\w+@\w+\.com$", r"^.{3}$", r"^[\d.]+$", r"^a{2,}$", r"^[é-ü]+$",
            *FORMATS.values()]


@pytest.mark.parametrize("regex", PATTERNS)
def test_patterns_match_what_python_matches(regex):
    pattern, rx, rng = compile_pattern(regex), re.compile(regex), random.Random(0)
    samples = ["2024-01-31", "2024-13-01", "12:30:00Z", "2024-01-31T12:30:00.5+02:00", "a@b.co", "1.2.3.4",
               "123e4567-e89b-12d3-a456-426614174000", "256.1.1.1", "P1DT2H", "http://x.y/z", "foobarbaz", "ab",
               "éü", "ñ"]
    samples += ["".join(rng.choice("abcdfoorbazxAZ09-.@:T+Z_ \"\\éñ") for _ in range(rng.randint(0, 8)))
                for _ in range(1500)]
    for s in samples:
        states = pattern.start
        for ch in s:
            states = pattern.advance(states, ord(ch))
        assert pattern.accepts(states) == (rx.search(s) is not None), (regex, s)


@pytest.mark.parametrize("text, want", [
    ('"ab-1"', "whole"), ('"éé-2"', "whole"), ('"a-1"', "refused"), ('"abcde-1"', "refused"),
    ('"ab-x"', "refused"), ('"ab-', "prefix"),
    ('"\\u0061b-1"', "refused"),        # under a pattern only short escapes: "a" is written as itself
    ('"ab\\n-1"', "refused"),
    (b'"\xc3\xa9\xc3', "prefix"),       # a UTF-8 character not yet whole that may still become [a-zé]
    (b'"\xc3\xb1', "refused"),          # n with a tilde: no such character in the class
    (b'"\xe2', "refused"),              # no three-byte character is in the class either
])
def test_a_pattern_holds_the_string_byte_by_byte(text, want):
    assert verdict(compile_schema({"type": "string", "pattern": "^[a-zé]{2,4}-\\d$"}), text) == want


@pytest.mark.parametrize("schema", [
    {"type": "string", "pattern": "^[a-zé]{2,4}-\\d$"}, {"type": "string", "format": "email"},
    {"type": "string", "pattern": "^[^a]*\"[\\\\]$"}, {"type": "string", "pattern": "é|ü"},
    {"type": "string", "format": "date-time"},
])
def test_pattern_strings_never_lead_into_a_dead_end(schema):
    regex = schema.get("pattern") or FORMATS[schema["format"]]
    for text in walk_never_stuck(compile_schema(schema), random.Random(3), 120, 60):
        assert re.search(regex, json.loads(text))


def test_tool_parameters_keep_their_shape_when_keywords_only_validate():
    """A tool whose schema has format / pattern / uniqueItems is still held to its properties: only those
    keywords are passed over (an anyOf whose branches begin alike is held, json_union.py)."""
    params = {"type": "object", "additionalProperties": False, "required": ["url"],
              "$schema": "http://json-schema.org/draft-07/schema#",
              "properties": {"url": {"type": "string", "format": "uri"},
                             "n": {"type": "integer", "exclusiveMinimum": 0},
                             "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                             "x": {"anyOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}}}
    call = compile_call([("fetch", params)])
    args = call.by_name[b'"fetch"']
    assert args.kind == "object" and set(args.props) == {"url", "n", "tags", "x"}
    assert verdict(args, '{"url": "not a uri", "x": "long", "tags": ["a", "a"], "n": 3}') == "whole"
    assert verdict(args, '{"url": "u", "x": [1]}') == "refused"        # the union of strings is held
    assert verdict(args, '{"url": "u", "other": 1}') == "refused"      # only its properties
    assert verdict(args, '{"n": 1}') == "refused"                      # url is required
    assert verdict(args, '{"url": "u", "n": 0}') == "refused"          # the bound is held
    with pytest.raises(SchemaError):                                   # the same schema as a response_format
        compile_schema({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}})


def test_patterns_refused_by_name():
    for bad, words in [("a**", "a quantifier after a quantifier"), ("[z-a]", "a bad range"), ("(", "an unclosed group"),
                       ("a$b", "'$' inside the pattern"), ("a{1,999}", "at most 256")]:
        with pytest.raises(PatternError, match=re.escape(words)):
            compile_pattern(bad)


def test_sampler_writes_dates_ids_and_bounded_numbers_on_the_real_vocabulary(smollm_tokenizer):
    vocab = Vocabulary.of(smollm_tokenizer)
    eos = smollm_tokenizer.eos_id
    schema = {"type": "object", "additionalProperties": False, "required": ["day", "id", "score", "n"],
              "properties": {"day": {"type": "string", "format": "date"},
                             "id": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
                             "score": {"type": "number", "minimum": 0, "maximum": 1},
                             "n": {"type": "integer", "minimum": -5, "maximum": 5}}}
    rng = np.random.default_rng(5)
    for seed in range(3):
        c = JsonConstraint(compile_schema(schema), vocab, [eos])
        s = Sampler(SamplingParams(temperature=0.9, seed=seed, top_k=40), vocab.n, constraint=c)
        out = b""
        for _ in range(300):
            logits = rng.normal(0, 3, vocab.n).astype(np.float32)
            logits[eos] += 4.0
            t = s.sample(logits)
            if t == eos:
                break
            out += vocab.bytes[t]
        else:
            raise AssertionError(f"no end: {out!r}")
        value = json.loads(out)
        assert re.fullmatch(FORMATS["date"][1:-1], value["day"]) and re.fullmatch(r"[A-Z]{2}-\d{3}", value["id"])
        assert 0 <= value["score"] <= 1 and type(value["n"]) is int and -5 <= value["n"] <= 5
