"""Unions whose branches begin alike (strata.engine.json_union through json_grammar): the automaton accepts
exactly the union of the branches' languages, never meets a dead end, is complete only when a branch is
whole; the schemas whose alternatives kept cannot be bounded are refused by name; the constraint's forced
bytes and vocabulary walk work on the union states."""

from __future__ import annotations

import random

import numpy as np
import pytest
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_grammar import complete, step
from strata.engine.json_schema import SchemaError, compile_schema
from strata.engine.token_bytes import Vocabulary

from tests.text.json_verdict import verdict

CAT = {"type": "object", "properties": {"type": {"const": "cat", "type": "string"}, "lives": {"type": "integer"}},
       "required": ["type", "lives"]}
DOG = {"type": "object", "properties": {"type": {"const": "dog", "type": "string"}, "good": {"type": "boolean"},
                                        "lives": {"type": "number"}}, "required": ["type", "good"]}
# Pydantic's Union[Cat, Dog] (anyOf of $refs) and its discriminated form (oneOf and a discriminator)
PETS = {"$defs": {"Cat": CAT, "Dog": DOG}, "type": "object", "required": ["pet"],
        "properties": {"pet": {"anyOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}}}
PETS_ONE_OF = {"$defs": {"Cat": CAT, "Dog": DOG}, "type": "object", "required": ["pet"],
               "properties": {"pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                                      "discriminator": {"propertyName": "type",
                                                        "mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}}}}}


@pytest.mark.parametrize("schema", [PETS, PETS_ONE_OF])
@pytest.mark.parametrize("text, want", [
    ('{"pet": {"type": "cat", "lives": 9}}', "whole"),
    ('{"pet": {"type": "dog", "good": true}}', "whole"),
    ('{"pet": {"lives": 9, "type": "cat"}}', "whole"),          # the discriminator after: both kept until then
    ('{"pet": {"lives": 2.5, "type": "dog", "good": false}}', "whole"),
    ('{"pet": {"lives": 2.5, "type": "cat"', "refused"),        # a cat's lives are an integer
    ('{"pet": {"type": "dog", "lives": 9}}', "refused"),        # a dog must say whether it is good
    ('{"pet": {"type": "cat", "good": true', "refused"),        # no cat key
    ('{"pet": {"type": "cow"', "refused"),
    ('{"pet": {"lives": 9}}', "refused"),                        # neither branch is whole
    ('{"pet": {"type": "cat", "lives": 9} }', "whole"),          # whitespace after the whole branch
    ('{"pet": {"type": "cat", "lives": 9}\n, "x": 1}', "refused"),
    ('{"pet": {"lives": 9', "prefix"),
])
def test_discriminated_object_unions(schema, text, want):
    assert verdict(compile_schema(schema), text) == want


@pytest.mark.parametrize("schema, text, want", [
    ({"type": ["integer", "number"]}, "1", "whole"),
    ({"type": ["integer", "number"]}, "1.5e-3", "whole"),
    ({"type": ["integer", "number"]}, "-", "prefix"),
    ({"type": ["integer", "number"]}, "01", "refused"),
    # 1 is whole for the integer branch and still open for the number one; `,` then ends both
    ({"type": "array", "items": {"anyOf": [{"type": "integer", "maximum": 5}, {"type": "number", "minimum": 10}]}},
     "[1, 12.5 ,3, 10]", "whole"),
    ({"type": "array", "items": {"anyOf": [{"type": "integer", "maximum": 5}, {"type": "number", "minimum": 10}]}},
     "[7]", "refused"),
    ({"type": "array", "items": {"anyOf": [{"type": "integer", "maximum": 5}, {"type": "number", "minimum": 10}]}},
     "[1.5]", "refused"),
    ({"type": "array", "items": {"anyOf": [{"type": "integer", "maximum": 5}, {"type": "number", "minimum": 10}]}},
     "[1", "prefix"),
    ({"anyOf": [{"type": "string", "pattern": "^a+$"}, {"type": "string", "maxLength": 2}]}, '"aaaa"', "whole"),
    ({"anyOf": [{"type": "string", "pattern": "^a+$"}, {"type": "string", "maxLength": 2}]}, '"bb"', "whole"),
    ({"anyOf": [{"type": "string", "pattern": "^a+$"}, {"type": "string", "maxLength": 2}]}, '"abc', "refused"),
    ({"anyOf": [{"type": "string", "format": "date"}, {"const": "never"}]}, '"never"', "whole"),
    ({"anyOf": [{"type": "string", "format": "date"}, {"const": "never"}]}, '"2024-02-29"', "whole"),
    ({"anyOf": [{"type": "string", "format": "date"}, {"const": "never"}]}, '"2024-02-30"', "refused"),
    ({"anyOf": [{"type": "integer"}, {"const": 1.5}]}, "1.5", "whole"),
    ({"anyOf": [{"type": "integer"}, {"const": 1.5}]}, "1.25", "refused"),
    # objects told apart only by the keys they allow / require
    ({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]}, '{"b": 2}', "whole"),
    ({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]}, '{"a": 1, "b', "refused"),
    ({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]}, "{}", "refused"),
    ({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                {"type": "object", "properties": {"a": {"type": "string"}, "c": {"type": "null"}}}]}, '{"a": "x", "c": null}', "whole"),
    ({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                {"type": "object", "properties": {"a": {"type": "string"}, "c": {"type": "null"}}}]}, '{"a": 1, "c"', "refused"),
    # arrays of different items, nested unions
    ({"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "array", "items": {"type": "string"}}]},
     '[1, 2]', "whole"),
    ({"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "array", "items": {"type": "string"}}]},
     '[1, "2"]', "refused"),
    ({"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "array", "items": {"type": "string"}}]},
     '[ ]', "whole"),
    ({"anyOf": [{"type": "object", "properties": {"v": {"type": ["integer", "number"]}}, "required": ["v"]},
                {"type": "object", "properties": {"v": {"anyOf": [{"type": "string"}, {"enum": ["x", 3]}]}}}]},
     '{"v": 3 }', "whole"),
    ({"anyOf": [{"type": "object", "properties": {"v": {"type": ["integer", "number"]}}, "required": ["v"]},
                {"type": "object", "properties": {"v": {"anyOf": [{"type": "string"}, {"enum": ["x", 3]}]}}}]},
     '{"v": "x"}', "whole"),
])
def test_alike_unions_take_exactly_their_branches(schema, text, want):
    assert verdict(compile_schema(schema), text) == want


TREE = {"$defs": {"node": {"anyOf": [
    {"type": "object", "properties": {"leaf": {"type": "integer"}}, "required": ["leaf"]},
    {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}, "leaf": {"type": "string"}}}]}},
    "$ref": "#/$defs/node"}


def test_a_union_through_a_ref_that_recurs_in_one_branch():
    node = compile_schema(TREE)
    assert verdict(node, '{"kids": [{"leaf": 1}, {"kids": [{"leaf": "a"}, {"leaf": 2}]}]}') == "whole"
    assert verdict(node, '{"leaf": 1, "kids": []}') == "refused"
    assert verdict(node, '{"kids": [{"leaf": 1.5') == "refused"
    assert verdict(node, '{"leaf": "a"}') == "whole"


def _copies(kind: str) -> dict:
    """Two copies of one recursive union, each of its branches holding one copy at the same place: nothing
    the branches write below is shared, what is kept would double with each level."""
    def branch(ref):
        if kind == "array":
            return {"type": "array", "items": {"$ref": ref}}
        return {"type": "object", "properties": {"l": {"$ref": ref}}}
    union = {"anyOf": [branch("#/$defs/u"), branch("#/$defs/v")]}
    return {"$defs": {"u": union, "v": union}, "$ref": "#/$defs/u"}


@pytest.mark.parametrize("kind", ["object", "array"])
def test_unions_that_keep_unbounded_alternatives_are_refused_by_name(kind):
    first = "{" if kind == "object" else "["
    with pytest.raises(SchemaError, match=rf"#/\$defs/[uv]\.anyOf: two branches that begin with '\{first}' hold, at "
                                          "one place, two different schemas that can each hold this union again"):
        compile_schema(_copies(kind))


def test_a_tool_parameter_with_an_unbounded_union_takes_any_value():
    from strata.engine.json_schema import tool_arguments

    params = {"type": "object", "properties": {"e": _copies("object"), "n": {"type": "integer"}},
              "$defs": _copies("object")["$defs"]}
    params["properties"]["e"] = {"$ref": "#/$defs/u"}
    args = tool_arguments(params)
    # the copy refused first (v) takes any value; u, whose second branch now holds any value, is bounded again
    assert verdict(args, '{"e": {"l": {"zz": [1]}}, "n": 2}') == "whole"
    assert verdict(args, '{"e": {"zz": [1]}, "n": 2}') == "refused"
    assert verdict(args, '{"e": {"l": {}}, "n": "two"}') == "refused"   # its neighbours are still held


# an expression tree: two recursive branches that begin alike hold the same $ref under the same keys (shared),
# a number leaf, and a branch whose "l" is any object (its levels are not shared: kept, once each)
def _op(name: str) -> dict:
    return {"type": "object", "required": ["op", "l", "r"],
            "properties": {"op": {"const": name}, "l": {"$ref": "#/$defs/e"}, "r": {"$ref": "#/$defs/e"}}}


EXPR = {"$defs": {"e": {"anyOf": [_op("add"), _op("mul"), {"type": "object", "properties": {"n": {"type": "number"}},
                                                             "required": ["n"]}]}}, "$ref": "#/$defs/e"}
EXPR_ANY = {"$defs": {"e": {"anyOf": [*EXPR["$defs"]["e"]["anyOf"],
                                      {"type": "object", "properties": {"l": {"type": "object"}}}]}}, "$ref": "#/$defs/e"}
ARRAYS = {"$defs": {"e": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/e"}, "maxItems": 1},
                                    {"type": "array", "items": {"$ref": "#/$defs/e"}, "minItems": 3}]}}, "$ref": "#/$defs/e"}


@pytest.mark.parametrize("schema, text, want", [
    (EXPR, '{"l": {"n": 1}, "op": "add", "r": {"op": "mul", "l": {"n": 2}, "r": {"n": 3}}}', "whole"),
    (EXPR, '{"l": {"l": {"n": 1}, "r": {"n": 2}, "op": "mul"}, "r": {"n": 3}, "op": "add"}', "whole"),
    (EXPR, '{"l": {"n": 1}, "r": {"n": 2}}', "refused"),            # no op
    (EXPR, '{"l": {"n": 1}, "r": {"n": 2}, "op": "sub"', "refused"),
    (EXPR_ANY, '{"l": {"x": [1]}}', "whole"),
    (EXPR_ANY, '{"l": {"x": [1]}, "op": "add"', "refused"),
    (EXPR_ANY, '{"l": {"l": {"l": {"n": 1}, "r": {"n": 2}, "op": "add"}}}', "whole"),
    (ARRAYS, "[[], [[[]]], [[], [], []]]", "whole"),                # no array of two items, at any level
    (ARRAYS, "[[[], []]]", "refused"),
    (ARRAYS, "[[], [], [[], []]", "refused"),
    (ARRAYS, "[[], []]", "refused"),
    (ARRAYS, "[]", "whole"),
])
def test_recursive_unions_whose_branches_share_a_ref(schema, text, want):
    assert verdict(compile_schema(schema), text) == want


def _frames(stack: tuple) -> int:
    return sum(1 + (sum(_frames(a[0]) for a in f[1]) if f[0] == "U" else 0) for f in stack)


@pytest.mark.parametrize("schema, unit, most", [(EXPR, '{"l": ', 2.0), (ARRAYS, "[", 2.0), (TREE, '{"kids": [', 2.0),
                                                (EXPR_ANY, '{"l": ', 4.0)])
def test_what_a_recursive_union_keeps_grows_with_its_depth_not_exponentially(schema, unit, most):
    """Nesting 6 then 12 levels while every branch that can is kept: the frames kept grow linearly (the
    shared $ref) or, with a branch holding any object, quadratically (that branch's levels, once each); a
    frame per branch and level would double at each one."""
    node = compile_schema(schema)
    sizes = []
    for depth in (6, 12):
        state = ((("V", node),), 0)
        for b in (unit * depth).encode():
            state = step(state, b)
            assert state is not None
        sizes.append(_frames(state[0]))
    assert sizes[1] <= most * sizes[0], sizes


# ----- exactness: the union's allowed bytes are its branches' allowed bytes, step by step -----

def _allowed(state) -> frozenset[int]:
    return frozenset(b for b in range(256) if step(state, b) is not None)


STRUCTURE = b'{}[]",: 0123456789.-etrufalsn'


def _compare_walk(union_node, branch_nodes, guide: bytes, rng: random.Random, max_bytes: int) -> bytes:
    """A walk that follows `guide` while it may (then random bytes, structural ones more often), checking at
    each byte: allowed(union) == the union of allowed(branch) over the branches still alive, complete(union)
    == some branch complete, and some byte or the end always goes on."""
    u = ((("V", union_node),), 0)
    branches = [((("V", n),), 0) for n in branch_nodes]
    out = b""
    for i in range(max_bytes):
        allowed = _allowed(u)
        want = frozenset().union(*(_allowed(s) for s in branches))
        assert allowed == want, (out, sorted(allowed ^ want))
        assert complete(u) == any(complete(s) for s in branches), out
        if not allowed:
            assert complete(u), f"a dead end after {out!r}"
            return out
        if i < len(guide) and guide[i] in allowed and rng.random() < 0.97:
            b = guide[i]
        else:
            structural = [c for c in STRUCTURE if c in allowed]
            b = rng.choice(structural if structural and rng.random() < 0.8 else sorted(allowed))
            guide = b""
        u, out = step(u, b), out + bytes([b])
        branches = [n for n in (step(s, b) for s in branches) if n is not None]
    return out


EXACT = [
    ([CAT, DOG], ['{"type": "cat", "lives": 9}', '{"lives": 2.5, "type": "dog", "good": true}', '{"lives": 3}']),
    ([{"type": "integer", "minimum": -5, "maximum": 50}, {"type": "number", "exclusiveMinimum": 40}, {"const": 7.25}],
     ["7.25", "45", "-3", "40.5", "7.2"]),
    ([{"type": "string", "pattern": "^(ab)+$"}, {"type": "string", "maxLength": 3}, {"enum": ["abc", "zz"]},
      {"type": "string", "format": "date"}], ['"abab"', '"abc"', '"2024-01-31"', '"zz"']),
    ([{"type": "array", "items": {"type": "integer"}, "maxItems": 2}, {"type": "array", "items": {"type": "string"}},
      {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "number"}]}, "minItems": 3}],
     ["[1, 2]", '["a"]', "[1, 2.5, 3]", "[]"]),
    ([{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]},
      {"type": "object", "properties": {"a": {"type": "number"}, "c": {"type": "boolean"}}},
      {"type": "object", "additionalProperties": {"type": "null"}}],
     ['{"a": 1, "b": "x"}', '{"a": 1.5, "c": true}', '{"zz": null}', '{"a": null}']),
    *[(schema["$defs"][name]["anyOf"], guides, schema["$defs"]) for schema, name, guides in [
      (EXPR, "e", ['{"l": {"n": 1}, "op": "add", "r": {"l": {"n": 2}, "r": {"n": 3}, "op": "mul"}}',
                                   '{"l": {"l": {"l": {"n": 1}, "r": {"n": 2}, "op": "mul"}']),
      (EXPR_ANY, "e", ['{"l": {"l": {"q": 1}}}', '{"l": {"l": {"n": 2}, "r": {"n": 3}, "op": "add"}}']),
      (ARRAYS, "e", ["[[[]], [[], [[]], []], []]", "[[[[]]]]", "[[], [[], []]]"]),
      (TREE, "node", ['{"kids": [{"leaf": 1}, {"kids": [{"leaf": "a"}]}]}', '{"kids": [{"kids": []}]}',
                      '{"leaf": "x", "kids": [{"leaf": 2}]}'])]],
]


@pytest.mark.parametrize("branches, guides, defs", [x if len(x) == 3 else (*x, {}) for x in EXACT])
@pytest.mark.parametrize("context", ["alone", "in an array", "in an object"])
def test_the_union_allows_exactly_its_branches_bytes(branches, guides, defs, context):
    """Alone, `[U]` against the union of `[B_i]`, and `{"k": U}` against the union of `{"k": B_i}` (each of
    those is exact): random walks guided by sample answers, with a random turn where they leave them."""
    def wrap(s):
        if context == "in an array":
            s = {"type": "array", "items": s, "minItems": 1, "maxItems": 1}
        elif context == "in an object":
            s = {"type": "object", "properties": {"k": s}, "required": ["k"]}
        return {**s, "$defs": defs}                  # a recursive union's branches hold the whole union again

    union = compile_schema(wrap({"anyOf": branches}))
    singles = [compile_schema(wrap(b)) for b in branches]
    rng = random.Random(5)
    ended = 0
    for n in range(48):     # 36 ended 3 times for one recursive union once gaps took one line break (ws_step)
        guide = guides[n % len(guides)].encode()
        if context == "in an array":
            guide = b"[" + guide + b"]"
        elif context == "in an object":
            guide = b'{"k": ' + guide + b"}"
        cut = rng.randrange(len(guide) + 8)
        out = _compare_walk(union, singles, guide[:cut], rng, 70)
        ended += verdict(union, out) == "whole"
    assert ended >= 4


# ----- the constraint over tokens: forced bytes, the vocabulary walk, memoized states -----

def test_forced_bytes_are_the_live_branches_common_key():
    schema = {"anyOf": [{"type": "object", "properties": {"kind": {"const": 1}, "x": {"type": "integer"}}, "required": ["kind"]},
                        {"type": "object", "properties": {"kind": {"const": 2}}, "required": ["kind"]},
                        {"type": "object", "properties": {"kid": {"type": "string"}}, "required": ["kid"]}]}
    vocab = Vocabulary([bytes([b]) for b in range(256)])
    c = JsonConstraint(compile_schema(schema), vocab, [])
    c.feed(b'{"ki')
    assert c.forced_bytes() == b""                   # "kind" or "kid"
    c.feed(b"n")
    assert c.forced_bytes() == b'd"'                 # only "kind" is left, in two branches
    c.feed(b'd": 2')
    assert all(f[0] != "U" for f in c.state[0])    # one branch left: its own frames again
    assert c.allows(ord("}")) and not c.allows(ord(","))    # the second branch, which has no other key
    c2 = JsonConstraint(compile_schema(schema), vocab, [])
    c2.feed(b'{"x": 3')                              # only the first branch has "x": it must name "kind"
    assert c2.forced_bytes() == b""                  # whitespace or ","
    c2.feed(b', "')
    assert c2.forced_bytes() == b'kind"'


def test_mask_and_allows_agree_on_union_states(tiny_model_factory):
    """The vocabulary walk (the mask) and token-by-token `allows` agree at every step of sampled answers,
    and the states are hashable (the constraint memoizes its steps by state)."""
    from strata.engine import GGUFFile
    from strata.engine.sampling import Sampler, SamplingParams
    from strata.engine.tokenizer import Tokenizer

    tok = Tokenizer.from_metadata(GGUFFile(tiny_model_factory(n_vocab=512, seed=11)).metadata)
    vocab, eos = Vocabulary.of(tok), tok.eos_id
    rng = np.random.default_rng(3)
    for schema in (PETS, {"type": "array", "items": {"type": ["integer", "number"]}, "maxItems": 4}):
        c = JsonConstraint(compile_schema(schema), vocab, [eos])
        s = Sampler(SamplingParams(temperature=1.0, seed=1), vocab.n, constraint=c)
        for _ in range(60):
            hash(c.state)
            mask = c.allowed_mask()
            each = np.array([c.allows(i) for i in range(vocab.n)])
            assert (mask == each).all(), np.flatnonzero(mask != each)[:5]
            t = s.sample(rng.normal(0, 2, vocab.n).astype(np.float32))
            if t == eos:
                break


def test_a_whole_union_lets_the_answer_end_and_not_before():
    vocab = Vocabulary([bytes([b]) for b in range(256)] + [b""])
    eos = 256
    c = JsonConstraint(compile_schema({"type": ["integer", "number"]}), vocab, [eos])
    c.feed(b"12")
    assert c.allows(eos) and c.allows(ord(".")) and not c.allows(ord(" "))
    c.feed(b".")
    assert not c.allows(eos)
    c.feed(b"5")
    assert c.allows(eos)


@pytest.mark.parametrize("schema, words", [
    ({"$defs": {"e": {"anyOf": [{"$ref": "#/$defs/e"}, {"type": "object"}]}}, "$ref": "#/$defs/e"},
     "#/$defs/e.anyOf: a branch of this union is the union itself"),
    ({"$defs": {"e": {"anyOf": [{"$ref": "#/$defs/f"}, {"type": "integer"}]},
                "f": {"anyOf": [{"$ref": "#/$defs/e"}, {"type": "null"}]}}, "$ref": "#/$defs/e"},
     "a branch of this union is the union itself"),
    ({"$defs": {"e": {"$ref": "#/$defs/e"}}, "$ref": "#/$defs/e"}, "schema.$ref '#/$defs/e' names only itself"),
])
def test_a_union_that_is_its_own_branch_is_refused_by_name(schema, words):
    """It was a RecursionError when the union was written (or, with a $ref naming only itself, a schema that
    took nothing)."""
    with pytest.raises(SchemaError, match=words.replace("$", r"\$").replace(".", r"\.")):
        compile_schema(schema)
