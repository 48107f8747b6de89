"""The next-byte hints (json_next_bytes.py, HeldCall._next_bytes and its subclasses') against the full scan of
all 256 bytes at every state a search reaches, not only the states a model's answer passes through
(test_next_bytes.py): any byte the automaton takes may be followed, so the states inside escapes, UTF-8
characters, exponents and keys that need escaping are reached as often as the punctuation. Schemas chosen
for the corners (keys with a quote, a slash, a newline, a non-ASCII letter; enum values that are prefixes of
each other; nested and empty arrays and objects; patterns with multi-byte classes; formats; unions of
numbers, strings and literals) and each call format's markup (Qwen3-Coder's XML, GLM's key-value tags, tool
names and keys that are prefixes of each other, Mistral's ids, Harmony's header and arguments). A hint that
leaves out a byte the state takes would make forced_run force text the schema does not force."""

from __future__ import annotations

import functools
import random

import pytest
from strata.engine.held_call import DONE
from strata.engine.json_args_call import HARMONY, MISTRAL, JsonArgsCall
from strata.engine.json_grammar import step
from strata.engine.json_next_bytes import next_bytes
from strata.engine.json_schema import compile_schema, tool_arguments
from strata.engine.keyed_call import KeyedCall, KeyedMarkup


def explore(start, step_fn, hint_fn, limit: int, seed: int) -> tuple[int, int]:
    """Visits up to `limit` states reachable from `start` (in random order, states with a hint four times in
    five: free text has endless states), asserting at each that every byte taken is in the hint.
    (states visited, states with a hint)."""
    rng = random.Random(seed)
    hinted_front, free_front, seen = [start], [], {start}
    visited = hinted = 0
    while (hinted_front or free_front) and visited < limit:
        front = hinted_front if hinted_front and (not free_front or rng.random() < 0.8) else free_front
        state = front.pop(rng.randrange(len(front)))
        visited += 1
        after = {b: t for b in range(256) if (t := step_fn(state, b)) is not None}
        hint = hint_fn(state)
        if hint is not None:
            hinted += 1
            assert set(after) <= hint, (state, sorted(set(after) - hint))
        for t in after.values():
            if t not in seen:
                seen.add(t)
                (hinted_front if hint_fn(t) is not None else free_front).append(t)
    return visited, hinted


SCHEMAS = [
    {"type": "object", "properties": {'a"b': {"type": "string"}, "é": {"type": "integer"}, "a/b": {"type": "number"},
                                      "x\ny": {"type": "boolean"}, "a": {"type": "null"}}, "required": ["a"]},
    {"enum": ["a", "ab", "abc", 1, 12, 1.5, None, True, "é", '"q', [1], {"k": 2}]},
    {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}, "maxItems": 3},
    {"type": "object", "properties": {}},
    {"type": "object", "properties": {"e": {"type": "array", "maxItems": 0}, "o": {"type": "object", "properties": {}}}},
    {"type": "string", "pattern": "^[a-zé€😀]{1,3}$"},
    {"type": "string", "pattern": '^\\\\["\\n]+$'},
    {"type": "string", "pattern": "^(ab|a\\u00e9|\\d+)$"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "email"},
    {"type": "number", "minimum": -1.5, "maximum": 100},
    {"type": "number"},
    {"type": "integer", "exclusiveMinimum": 5, "maximum": 1000},
    {"anyOf": [{"type": "integer"}, {"type": "number"}, {"const": "x"}, {"type": "string", "pattern": "^a+$"}]},
    {"type": ["integer", "number", "null", "string"]},
    {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "array", "items": {"type": "string"}}]},
    {"type": "object", "properties": {"k": {"anyOf": [{"type": "integer"}, {"type": "number"}]},
                                      "l": {"enum": [1, 10, 100]}}, "required": ["k"]},
    {"type": "string", "minLength": 2, "maxLength": 3},
    {},
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "number", "minimum": 5}]}},
    {"anyOf": [{"type": "object", "properties": {"t": {"const": "a"}, "v": {"type": "integer"}}, "required": ["t"]},
               {"type": "object", "properties": {"t": {"const": "ab"}, "w": {"type": "string"}}, "required": ["t"]}]},
    {"anyOf": [{"type": "string", "pattern": "^[0-9]+$"}, {"type": "string", "format": "date"}, {"enum": ["2024", 2024]}]},
]


@pytest.mark.parametrize("k", range(len(SCHEMAS)))
def test_json_hints_hold_at_every_state_reached(k):
    memo_step = functools.lru_cache(maxsize=None)(step)
    visited, hinted = explore(((("V", compile_schema(SCHEMAS[k])),), 0), memo_step, next_bytes, 400, k)
    assert visited > 20 and hinted > 0, (visited, hinted)


XML = KeyedMarkup(opening=b"\n<function=", first=b">\n<parameter=", empty=b">\n</function>\n</tool_call>", mid=b">\n",
                  value_end=b"\n</parameter>\n<", next_key=b"parameter=", end=b"/function>\n</tool_call>")
GLM = KeyedMarkup(opening=b"", first=b"\n<arg_key>", empty=b"\n</tool_call>", mid=b"</arg_key>\n<arg_value>",
                  value_end=b"</arg_value>\n<", next_key=b"arg_key>", end=b"/tool_call>")
KEYED_TOOLS = [("get", ("a", "ab", "a<b", "é"), ("a",)), ("get_time", None, ()), ("g", (), ())]
ARGS = [{"type": "object", "properties": {"a": {"type": "string"}, "ab": {"enum": [1, 12]}, "n": {"type": "number"}},
         "required": ["a"]},
        {"type": "object", "properties": {}}, None,
        {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}}}]
ARGS_TOOLS = [(name, tool_arguments(schema)) for name, schema in zip(("get", "get_time", "g", "h"), ARGS, strict=True)]


def calls():
    """(id, a held call, the bytes written before the search starts)."""
    out = [("xml", KeyedCall(XML, KEYED_TOOLS, None, lead=b"<tool_call>"), b""),
           ("glm", KeyedCall(GLM, KEYED_TOOLS, None, lead=b"<tool_call>"), b""),
           ("mistral", JsonArgsCall(MISTRAL, ARGS_TOOLS, None, demanded=True), b""),
           ("harmony", JsonArgsCall(HARMONY, ARGS_TOOLS, None, demanded=True), b""),
           ("harmony-args", JsonArgsCall(HARMONY, ARGS_TOOLS, None, demanded=True),
            b"to=functions.get <|constrain|>json<|message|>"),
           ("harmony-nested", JsonArgsCall(HARMONY, ARGS_TOOLS, None, demanded=True), b"to=functions.h<|message|>")]
    return [pytest.param(c, pre, id=name) for name, c, pre in out]


@pytest.mark.parametrize(("call", "written"), calls())
def test_call_hints_hold_at_every_state_reached(call, written):
    start = call._from(call.state, written)
    assert start is not None and start != DONE
    visited, hinted = explore(start, call._step, call._next_bytes, 1200, 7)
    assert visited > 70 and hinted > 10, (visited, hinted)


@pytest.mark.parametrize("markup", [{"lead": b"<tool_call>\n", "close": b"\n</tool_call>", "forbid": (b"</tool_call>",)},
                                    {"lead": b"[", "spacing": (b", ", b": ")}, {}], ids=["hermes", "spaced", "bare"])
def test_json_call_hints_hold_at_every_state_reached(markup):
    """A JSON call (compile_call: the tool's name a literal whose end the call object learns, names that are
    prefixes of each other) held with a lead, a closing tag, forbidden text and a template's spacing."""
    from strata.engine.json_constraint import JsonConstraint, _hint
    from strata.engine.json_schema import compile_call

    tool = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "cf"]}},
            "required": ["city"]}
    root = compile_call([("get", tool), ("get_time", {"type": "object", "properties": {}}), ("g", None)])
    c = JsonConstraint(root, None, [], **markup)
    visited, hinted = explore(c.state, c._step, _hint, 1500, 3)
    assert visited == 1500 and hinted > 1000, (visited, hinted)
