"""JSON answers fuzzed: random schemas within the supported subset (bounds, patterns, formats, unions,
those whose branches begin alike too, refs), a noisy model's answers sampled through the constraint
(strata.engine.json_constraint) on real vocabularies; every finished answer validates against its schema and none meets a dead end. And the byte
automaton's walk over all 256 bytes for patterns with UTF-8 classes: never stuck, every string it finishes
matches the pattern."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import numpy as np
import pytest
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_schema import ANY, SchemaError, compile_call, compile_schema
from strata.engine.token_bytes import Vocabulary

from tests.text.fuzz_model import JSON_PIECES, Drive, NoisyModel, held_until, sampler_for
from tests.text.json_verdict import verdict


def test_a_number_has_two_exponent_digits_at_most():
    """7E643 is valid JSON but no double: json.loads reads inf and the calls' readers refuse the call (the
    held call came out as text); two exponent digits always stay finite within MAX_NUMBER."""
    from strata.engine.chat_template import _calls_from_json

    assert _calls_from_json('{"name": "f", "arguments": {"a": 7E643}}') is None
    assert verdict(ANY, "7E643") == "refused" and verdict(ANY, "7E64") == "whole" and verdict(ANY, "-1.5e-07") == "whole"
    call = compile_call([("f", {"type": "object", "properties": {"a": {"type": "number"}}})])
    assert verdict(call, '{"name": "f", "arguments": {"a": 7E643}}') == "refused"
    assert json.loads("9999999999999999999999e99") < float("inf")


# ----- random schemas, a noisy model, the answers validated -----

FORMAT_SAMPLES = {"date": b"2024-02-29", "date-time": b"2024-01-31T12:30:00Z", "time": b"12:30:00Z",
                  "uuid": b"123e4567-e89b-12d3-a456-426614174000", "email": b"a@b.co", "ipv4": b"10.0.0.1",
                  "hostname": b"ex.org", "uri": b"http://x.y/z", "duration": b"P1DT2H"}
PATTERNS = ["^[a-z]{1,6}$", "^\\d{3}-\\d{2}$", "^(ab|cd)+$", "^[A-Z][a-zé]*$", "^\\w+(\\.\\w+)?$", "é|ü", "^[^\"]{0,4}$"]


def random_value_schema(rng: np.random.Generator, depth: int, defs: dict) -> dict:
    kinds = ["string", "bounded_int", "bounded_num", "pattern", "format", "enum", "bool", "union", "alike", "ref",
             "array", "object", "const", "number"]
    kind = kinds[int(rng.integers(len(kinds) - (2 if depth >= 2 else 0)))]
    if kind == "string":
        s: dict = {"type": "string"}
        if rng.random() < 0.5:
            s["maxLength"] = int(rng.integers(0, 8))
        return s
    if kind == "bounded_int":
        lo = int(rng.integers(-10**6, 10**6))
        return {"type": "integer", "minimum": lo, "maximum": lo + int(rng.integers(0, 10 ** int(rng.integers(0, 5))))}
    if kind == "bounded_num":
        lo = round(float(rng.uniform(-1000, 1000)), int(rng.integers(0, 4)))
        s = {"type": "number", ("exclusiveMinimum" if rng.random() < 0.4 else "minimum"): lo}
        if rng.random() < 0.7:
            s["exclusiveMaximum" if rng.random() < 0.4 else "maximum"] = lo + round(float(rng.uniform(0.001, 50)), 3)
        return s
    if kind == "pattern":
        return {"type": "string", "pattern": PATTERNS[int(rng.integers(len(PATTERNS)))]}
    if kind == "format":
        return {"type": "string", "format": sorted(FORMAT_SAMPLES)[int(rng.integers(len(FORMAT_SAMPLES)))]}
    if kind == "enum":
        pool = ["a", "ab", "b c", 1, 12, -3.5, None, False, "é", 'q"']
        return {"enum": [pool[int(i)] for i in rng.choice(len(pool), int(rng.integers(1, 5)), replace=False)]}
    if kind == "const":
        return {"const": ["x", 7, {"k": [1, None]}][int(rng.integers(3))]}
    if kind == "bool":
        return {"type": "boolean"}
    if kind == "number":
        return {"type": ["number", "null"]} if rng.random() < 0.5 else {"type": "integer"}
    if kind == "union":                              # branches that begin differently
        branches = [{"type": "string", "maxLength": 5}, {"type": "integer", "minimum": 0, "maximum": 99},
                    {"type": "null"}, {"type": "boolean"}, {"type": "array", "items": {"type": "integer"}, "maxItems": 3}]
        idx = rng.choice(len(branches), int(rng.integers(2, 4)), replace=False)
        return {"anyOf": [branches[int(i)] for i in idx]}
    if kind == "alike":
        return alike_union(rng, depth, defs)
    if kind == "ref":
        if "node" not in defs:
            defs["node"] = {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                                             "kids": {"type": "array", "maxItems": 2,
                                                                      "items": {"$ref": "#/$defs/node"}}},
                            "required": ["v"]}
        return {"$ref": "#/$defs/node"}
    if kind == "array":
        s = {"type": "array", "items": random_value_schema(rng, depth + 1, defs)}
        lo = int(rng.integers(0, 3))
        if rng.random() < 0.5:
            s["minItems"] = lo
        if rng.random() < 0.6:
            s["maxItems"] = lo + int(rng.integers(0, 3))
        return s
    return random_object_schema(rng, depth + 1, defs)


def alike_union(rng: np.random.Generator, depth: int, defs: dict) -> dict:
    """A union whose branches begin alike (json_union.py): integer | number, strings with and without a
    pattern or format, objects told apart by a "type" const (through $refs, Pydantic's shape) or by their
    keys, arrays of different items, an expression tree (a recursive union)."""
    kind = int(rng.integers(8 if depth < 2 else 3))
    if kind == 0:
        lo = int(rng.integers(-50, 50))
        return {"anyOf": [{"type": "integer", "minimum": lo, "maximum": lo + int(rng.integers(0, 30))},
                          {"type": "number", "minimum": lo + float(rng.uniform(-5, 40))}]}
    if kind == 1:
        return {"type": ["integer", "number"]} if rng.random() < 0.5 else {"anyOf": [{"type": "integer"}, {"const": 2.5}]}
    if kind == 2:
        other = {"type": "string", "format": sorted(FORMAT_SAMPLES)[int(rng.integers(len(FORMAT_SAMPLES)))]} \
            if rng.random() < 0.5 else {"enum": ["ab", "b c", 12]}
        return {"anyOf": [{"type": "string", "maxLength": int(rng.integers(0, 4))},
                          {"type": "string", "pattern": PATTERNS[int(rng.integers(len(PATTERNS)))]}, other]}
    if kind in (3, 4):                               # a discriminated union: Pydantic's anyOf / oneOf of $refs
        names = []
        for tag in ("cat", "dog", "cow")[: int(rng.integers(2, 4))]:
            body = random_object_schema(rng, depth + 1, defs)
            body["properties"] = {"type": {"const": tag, "type": "string"}, **body["properties"]}
            body["required"] = ["type", *body.get("required", [])]
            names.append(f"Pet_{tag}_{len(defs)}")
            defs[names[-1]] = body
        return {("oneOf" if kind == 3 else "anyOf"): [{"$ref": f"#/$defs/{n}"} for n in names]}
    if kind == 5:                                    # objects told apart by their keys only
        return {"anyOf": [random_object_schema(rng, depth + 1, defs) for _ in range(int(rng.integers(2, 4)))]}
    if kind == 6:
        return {"anyOf": [{"type": "array", "items": random_value_schema(rng, depth + 1, defs), "maxItems": 3}
                          for _ in range(2)]}
    if "expr" not in defs:                           # a recursive union: two branches hold it under the same keys
        def op(name):
            return {"type": "object", "required": ["op", "l", "r"],
                    "properties": {"op": {"const": name}, "l": {"$ref": "#/$defs/expr"}, "r": {"$ref": "#/$defs/expr"}}}
        defs["expr"] = {"anyOf": [op("add"), op("mul"), {"type": "object", "required": ["n"],
                                                         "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}}]}
    return {"$ref": "#/$defs/expr"}


def random_object_schema(rng: np.random.Generator, depth: int, defs: dict) -> dict:
    keys = [f"k{i}" + "xyz"[: int(rng.integers(0, 3))] for i in range(int(rng.integers(0, 4)))]
    props = {k: random_value_schema(rng, depth, defs) for k in keys}
    out: dict = {"type": "object", "properties": props}
    req = [k for k in keys if rng.random() < 0.6]
    if req:
        out["required"] = req
    return out


def random_root(rng: np.random.Generator) -> dict:
    defs: dict = {}
    root = random_object_schema(rng, 0, defs) if rng.random() < 0.8 else random_value_schema(rng, 0, defs)
    if defs:
        root = {**root, "$defs": defs}
    return root


def json_pieces(schema: dict) -> list[bytes]:
    """What a model that read the schema writes: its keys, enum values, a sample of each format."""
    out: list[bytes] = []

    def walk(s):
        if isinstance(s, dict):
            for k, v in (s.get("properties") or {}).items():
                out.extend([json.dumps(k).encode() + b": "] * 2)
                walk(v)
            for v in s.get("enum", ()):
                out.append(json.dumps(v, ensure_ascii=False).encode())
            if "const" in s:
                out.append(json.dumps(s["const"], ensure_ascii=False).encode())
            if "format" in s:
                out.append(FORMAT_SAMPLES[s["format"]] + b'"')
            for key in ("items", "$defs"):
                walk(s.get(key))
            for v in [*s.get("anyOf", ()), *s.get("oneOf", ())]:
                walk(v)
            for v in (s.get("$defs") or {}).values():
                walk(v)
    walk(schema)
    return out


def check_formats(schema: dict, value) -> None:
    """The formats jsonschema checks only with packages this environment lacks, checked here."""
    import datetime
    import ipaddress
    import uuid

    if isinstance(schema, dict) and "$ref" in schema:
        return
    if isinstance(schema, dict) and isinstance(value, str) and "format" in schema:
        f = schema["format"]
        if f == "date":
            datetime.date.fromisoformat(value)
        elif f == "date-time":
            datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        elif f == "uuid":
            uuid.UUID(value)
        elif f == "ipv4":
            ipaddress.IPv4Address(value)
    if isinstance(schema, dict) and isinstance(value, dict):
        for k, v in value.items():
            check_formats((schema.get("properties") or {}).get(k), v)
    if isinstance(schema, dict) and isinstance(value, list):
        for v in value:
            check_formats(schema.get("items"), v)


def alike_root(rng: np.random.Generator) -> dict:
    """An object of 1-3 alike-beginning unions (or one such union alone)."""
    defs: dict = {}
    if rng.random() < 0.2:
        root = alike_union(rng, 0, defs)
    else:
        props = {f"u{i}": alike_union(rng, 1, defs) for i in range(int(rng.integers(1, 4)))}
        root = {"type": "object", "properties": props, "required": sorted(props)}
    return {**root, "$defs": defs} if defs else root


def fuzz_answers(tokenizer, n: int, seed: int, limit: int, check_mask: float = 0.0,
                 roots=random_root) -> tuple[int, int]:
    """(answers finished and valid, answers cut at `limit`); a dead end or an invalid answer fails. Held as the
    server holds them (the forced text in the tokenizer's split). `roots(rng)`: a random schema."""
    vocab, eos = Vocabulary.of(tokenizer), tokenizer.eos_id
    rng = np.random.default_rng(seed)
    done = cut = 0
    for _ in range(n):
        schema = roots(rng)
        try:
            root = compile_schema(schema)
        except SchemaError as e:
            raise AssertionError(f"the generator wrote a schema outside the subset: {e}") from None
        c = JsonConstraint(root, vocab, [eos])
        model = NoisyModel(vocab, json_pieces(schema) + list(JSON_PIECES), rng)
        sampler, drive = sampler_for(c, vocab, rng, tokenizer), Drive()
        if not held_until(model, sampler, drive, lambda c=c: bool(c.state[0]), limit, check_mask):
            assert not drive.dead_end, (schema, drive.text(vocab, [eos]))
            cut += 1
            continue
        z = np.full(vocab.n, -1e4, dtype=np.float32)
        z[eos] = 0.0
        assert sampler.sample(z) == eos, "a whole value lets the answer end"
        text = drive.text(vocab, [eos])
        value = json.loads(text)
        jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(value)
        check_formats(schema, value)
        done += 1
    return done, cut


def test_random_schemas_on_a_small_vocabulary(tiny_model_factory):
    from strata.engine import GGUFFile
    from strata.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_metadata(GGUFFile(tiny_model_factory(n_vocab=512, seed=11)).metadata)
    done, cut = fuzz_answers(tok, n=40, seed=1, limit=250, check_mask=0.05)
    assert done >= 28, (done, cut)


def test_random_schemas_on_the_default_models_vocabulary(smollm_tokenizer):
    done, cut = fuzz_answers(smollm_tokenizer, n=10, seed=2, limit=200)
    assert done >= 7, (done, cut)


def test_alike_unions_on_a_small_and_the_default_vocabulary(tiny_model_factory, smollm_tokenizer):
    """Unions whose branches begin alike (discriminated objects, integer | number, strings with and without a
    pattern, arrays of different items): every answer a oneOf / anyOf jsonschema accepts, no dead end."""
    from strata.engine import GGUFFile
    from strata.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_metadata(GGUFFile(tiny_model_factory(n_vocab=512, seed=11)).metadata)
    done, cut = fuzz_answers(tok, n=30, seed=4, limit=400, check_mask=0.05, roots=alike_root)
    assert done >= 14, (done, cut)             # the rest cut at the limit (a noisy model nests expression trees)
    done, cut = fuzz_answers(smollm_tokenizer, n=10, seed=5, limit=300, roots=alike_root)
    assert done >= 6, (done, cut)


UTF8_PATTERNS = ["^[é-ü]{1,3}$", "^[^a-z]{2}$", "^[\u0100-\uffff]+x$", "^[😀-🙏]+$", "^.{2}$", "^[^\\x00-\\x7f]+$",
                 "^(ß|日本|🙂)+$", "^\\W\\D$", "^[\u07ff-\u0801\uffff\U00010000]$", "^[\ud7ff\ue000]$", "^ñ+$"]


@pytest.mark.parametrize("regex", UTF8_PATTERNS)
def test_utf8_class_patterns_walk_all_bytes_without_a_dead_end(regex):
    """Random walks over all 256 bytes through a pattern whose classes reach past ASCII (lead bytes of two,
    three and four bytes, the edges of each UTF-8 length, surrogates left out): some byte or the end always
    goes on, and every finished string is UTF-8 that Python's re matches."""
    from tests.text.test_json_bounds_patterns import walk_never_stuck

    rx = re.compile(regex, re.ASCII)                 # JSON Schema's \w \d are ASCII's (ECMA-262)
    done = walk_never_stuck(compile_schema({"type": "string", "pattern": regex}), random.Random(7), 50, 60)
    assert len(done) >= 10
    for text in done:
        value = json.loads(text.decode("utf-8"))
        assert rx.search(value), (regex, text)


def test_space_classes_are_ecma_262s():
    """JSON Schema's patterns are ECMA-262's: \\s is its WhiteSpace and LineTerminator, the Unicode spaces
    too (U+3000 was \\S here); \\v is no writable character under a pattern (only a \\u escape writes it)."""
    from strata.engine.json_patterns import compile_pattern

    for ch in "\t\n\f\r \u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\ufeff":
        space, other = compile_pattern("^\\s$"), compile_pattern("^\\S$")
        assert space.accepts(space.advance(space.start, ord(ch))), hex(ord(ch))
        assert not other.advance(other.start, ord(ch)), hex(ord(ch))
    other = compile_pattern("^\\S$")
    assert other.accepts(other.advance(other.start, ord("\u200b")))       # a zero-width space is no space


def test_a_date_has_the_days_of_its_month():
    """format date (and date-time) is RFC 3339's full-date: "2023-02-30" and "2024-04-31" were held as
    dates (jsonschema's checker and datetime.date refuse them); February 29th only in leap years."""
    import datetime

    date = compile_schema({"type": "string", "format": "date"})
    stamp = compile_schema({"type": "string", "format": "date-time"})
    for text, ok in [("2023-02-30", False), ("2024-04-31", False), ("2023-02-29", False), ("1900-02-29", False),
                     ("2024-02-29", True), ("2000-02-29", True), ("2024-12-31", True), ("2024-06-30", True)]:
        assert (verdict(date, f'"{text}"') == "whole") == ok, text
        assert (verdict(stamp, f'"{text}T12:00:00Z"') == "whole") == ok, text
        if ok:
            datetime.date.fromisoformat(text)
