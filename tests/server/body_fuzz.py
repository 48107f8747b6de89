"""Generated request bodies against a live `strata serve`: valid bodies of every POST endpoint, mutated.

What it is: a seeded, deterministic generator (`cases(seed, n)`) that starts from VALID bodies (each endpoint's
fields at every depth the API reads: tools, tool_choice, response_format, logprobs, stream options, tool calls
and their results, content blocks, thinking, sessions' save / restore bodies) and damages them one or two places
at a time (a field dropped or added, a type swapped, numbers at their edges, text no tokenizer expects, nesting,
duplicate keys, wrong roles, tool call ids that pair nothing, content parts of unknown types), plus raw bodies
(truncated JSON, bytes that are not UTF-8, a top-level array / number, another Content-Type); and `judge`, which
says what is wrong with one answer (a 5xx, an error not in its API's shape, a stream cut short). The test
(test_generated_bodies.py) runs a few hundred; scripts/fuzz_bodies.py runs any number with any seed.
What it is not: the hand-written tables of exact wordings (test_bad_requests.py, test_malformed_tool_parts.py).
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["path"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "read", "description": "read a file", "parameters": SCHEMA}}]
CHAT_HISTORY = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "open a.py"}]},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\": \"a.py\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "print(1)"}]},
    {"role": "user", "content": "and now?"},
]
MESSAGES_HISTORY = [
    {"role": "user", "content": [{"type": "text", "text": "open a.py"}]},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "I read it", "signature": "sig"},
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "print(1)"}]},
        {"type": "text", "text": "and now?"}]},
]
RESPONSES_INPUT = [
    {"type": "message", "role": "developer", "content": "be brief"},
    {"role": "user", "content": [{"type": "input_text", "text": "open a.py"}]},
    {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{\"path\": \"a.py\"}"},
    {"type": "function_call_output", "call_id": "call_1", "output": "print(1)"},
    {"type": "custom_tool_call", "call_id": "call_2", "name": "patch", "input": "*** Begin Patch"},
    {"type": "custom_tool_call_output", "call_id": "call_2", "output": "done"},
    {"role": "assistant", "content": [{"type": "output_text", "text": "Read."}]},
    {"role": "user", "content": "and now?"},
]

# (path, valid body); the sizes are small (the tiny model answers a few tokens per request)
VALID: list[tuple[str, dict]] = [
    ("/v1/chat/completions", {
        "model": "tiny", "messages": CHAT_HISTORY, "tools": CHAT_TOOLS, "max_tokens": 4, "temperature": 0.7,
        "top_p": 0.9, "seed": 7, "stop": ["zz", "\n\n"], "tool_choice": "auto", "parallel_tool_calls": True,
        "logit_bias": {"5": 1}, "user": "u"}),
    ("/v1/chat/completions", {
        "model": "tiny", "messages": CHAT_HISTORY, "tools": CHAT_TOOLS, "max_completion_tokens": 4,
        "tool_choice": {"type": "function", "function": {"name": "read"}}, "stream": True,
        "stream_options": {"include_usage": True}}),
    ("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "name a colour"}], "max_tokens": 4, "logprobs": True,
        "top_logprobs": 2, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "c", "strict": True, "schema": {
            "type": "object", "properties": {"colour": {"type": "string", "enum": ["red", "blue"]}},
            "required": ["colour"], "additionalProperties": False}}}}),
    ("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "json please"}], "max_tokens": 4, "stream": True,
        "response_format": {"type": "json_object"}, "frequency_penalty": 0.5, "presence_penalty": 0.1}),
    ("/v1/completions", {"model": "tiny", "prompt": "def f(", "max_tokens": 4, "temperature": 0, "stop": ["\n"],
                         "logprobs": 2, "suffix": "    return 1\n"}),
    ("/v1/completions", {"model": "tiny", "prompt": [5, 6, 7, 8], "max_tokens": 3, "stream": True,
                         "stream_options": {"include_usage": True}, "seed": 3}),
    ("/infill", {"input_prefix": "def f(", "input_suffix": "\n    return 1\n", "prompt": "x",
                 "input_extra": [{"filename": "b.py", "text": "import os\n"}], "n_predict": 4, "temperature": 0,
                 "t_max_prompt_ms": 500, "n_indent": 4}),
    ("/infill", {"input_prefix": "a = ", "input_suffix": "", "n_predict": 3, "stream": True}),
    ("/completion", {"prompt": "def f(", "n_predict": 4, "stop": ["\n"], "temperature": 0, "top_k": 40,
                     "min_p": 0.05, "cache_prompt": True, "samplers": ["top_k"]}),
    ("/completion", {"prompt": "x = ", "n_predict": 3, "stream": True, "ignore_eos": True}),
    ("/v1/responses", {
        "model": "tiny", "instructions": "be brief", "input": RESPONSES_INPUT, "max_output_tokens": 4,
        "tools": [{"type": "function", "name": "read", "description": "read", "parameters": SCHEMA, "strict": False},
                  {"type": "custom", "name": "patch", "description": "apply a patch"}],
        "tool_choice": "auto", "temperature": 0.5, "store": False, "reasoning": {"effort": "low"}}),
    ("/v1/responses", {
        "input": "name a colour", "max_output_tokens": 4, "stream": True,
        "text": {"format": {"type": "json_schema", "name": "c", "schema": {
            "type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}}}}),
    ("/v1/responses/compact", {"model": "tiny", "input": RESPONSES_INPUT[:4], "instructions": "be brief"}),
    ("/v1/messages", {
        "model": "tiny", "max_tokens": 4, "system": [{"type": "text", "text": "be brief",
                                                      "cache_control": {"type": "ephemeral"}}],
        "messages": MESSAGES_HISTORY, "stop_sequences": ["zz"], "temperature": 0.5, "top_k": 20,
        "tools": [{"name": "read", "description": "read a file", "input_schema": SCHEMA}],
        "tool_choice": {"type": "auto"}, "metadata": {"user_id": "u"}}),
    ("/v1/messages", {
        "model": "tiny", "max_tokens": 40, "stream": True, "system": "be brief",
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]}),
    ("/v1/messages/count_tokens", {
        "model": "tiny", "system": "be brief", "messages": MESSAGES_HISTORY,
        "tools": [{"name": "read", "description": "read a file", "input_schema": SCHEMA}]}),
    ("/v1/sessions/fz/save", {"slot": "main"}),
    ("/v1/sessions/fz/save", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/sessions/fz/restore", {"slot": 1}),
]
STREAMS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/infill", "/completion")

DEEP: Any = 0
for _ in range(140):
    DEEP = [DEEP] if len(str(DEEP)) % 2 else {"d": DEEP}
STRINGS = ["", " ", "x", "\x00", "a\x00b", "\u202eevil\u202c", "🙂" * 40, "e\u0301" * 30, "\ufeff", "\r\n",
           "user", "assistant", "tool", "system", "function", "bogus", "<|im_end|>", "<|im_start|>assistant\n",
           "{\"path\": 1}", "{\"path\": \"\\ud800\"}", "[\"\\udfff\"]", "{", "null", "NaN", "-1", "1e999", "x" * 70_000, "\u0000" * 100, "\uffff", "\U0010ffff"]
NUMBERS = [0, -1, -2, 1, 2, -0.0, 0.5, 1.5, 3.0, 2**31, 2**32, 2**63, 2**64, -(2**63) - 1, 10**30, 1e308, -1e308,
           5e-324, 1048576, 1048577, 4096, 4095, 2048, 1024, 1023, 511, 512, 513, 100_000, 20, 21]
# JSON texts a careless client writes where a value goes (NaN / Infinity literals, lone surrogates)
RAW_VALUES = ["NaN", "Infinity", "-Infinity", '"\\ud800"', '"a\\udc00b"', '"\\ud83d"', "1e999", "-1e999",
              "1E400", "0.0000000000000000000000001e-400", "123456789012345678901234567890", '"\\u0000"']
EXTRA_KEYS = ["n", "seed", "stream", "stream_options", "logit_bias", "stop", "tool_choice", "response_format",
              "top_k", "min_p", "presence_penalty", "frequency_penalty", "max_completion_tokens", "max_tokens",
              "logprobs", "top_logprobs", "thinking", "reasoning", "text", "parallel_tool_calls", "echo",
              "suffix", "previous_response_id", "include", "truncation", "chat_template_kwargs", "ignore_eos",
              "stop_sequences", "system", "instructions", "tools", "messages", "input", "prompt", "n_predict",
              "input_extra", "id_slot", "slot", "tokens", "conversation", "repeat_penalty", "typical_p",
              "reasoning_effort", "prediction", "service_tier", "grammar", "json_schema", "t_max_predict_ms",
              "type", "role", "content", "name", "id", "call_id", "tool_call_id", "tool_use_id", "arguments",
              "input_schema", "parameters", "cache_control", "is_error", "signature", "budget_tokens", "", "🙂"]
ROLES = ["user", "assistant", "system", "developer", "tool", "function", "model", "ipython", "bogus", "", "USER"]
PART_TYPES = ["text", "input_text", "output_text", "image", "image_url", "input_image", "input_file", "file",
              "document", "tool_use", "tool_result", "thinking", "redacted_thinking", "server_tool_use",
              "web_search_tool_result", "refusal", "input_audio", "audio", "function_call", "reasoning",
              "search_result", "container_upload", "mcp_tool_use", "hologram", ""]
SCHEMAS = [
    {}, {"type": "object"}, {"type": "string", "pattern": "(["}, {"type": "string", "pattern": "^a{3,1}$"},
    {"type": "string", "minLength": 5, "maxLength": 2}, {"type": "integer", "minimum": 5, "maximum": 1},
    {"type": "array", "minItems": 100000}, {"type": "array", "items": {"type": "string"}, "maxItems": 0},
    {"enum": []}, {"enum": [None, 1, "a", [1], {"a": 1}]}, {"const": {"a": [1, 2]}}, {"type": ["string", "null"]},
    {"anyOf": []}, {"oneOf": [{"type": "string"}, {"type": "string"}]}, {"allOf": [{"type": "string"}, {"type": "integer"}]},
    {"$ref": "#/$defs/x"}, {"$ref": "#"}, {"$ref": "http://example.com/s"},
    {"$defs": {"n": {"type": "object", "properties": {"n": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
    {"type": "object", "properties": {"a": {"type": "string", "format": "date-time"}}, "required": ["b"]},
    {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 3},
    {"type": "object", "patternProperties": {"^x": {"type": "string"}}}, {"not": {"type": "string"}},
    {"type": "number", "multipleOf": 0}, {"type": "number", "multipleOf": 1e-300}, {"type": "bogus"},
    {"type": "string", "enum": ["🙂", "\x00", ""]}, {"if": {"type": "string"}, "then": {"minLength": 1}},
    {"type": "object", "properties": {"": {"type": "string"}}, "required": [""]}, True, False,
]
# a known field's edge values (the "value" mutation): what an API reads, at the edges it checks
FIELD_VALUES: dict[str, list] = {
    "max_tokens": [1, 2, 1048576, 1048577, 0, -1, 4096, 1024, 1025, True, 2.0, "4"],
    "max_completion_tokens": [1, 1048576, 0, None], "max_output_tokens": [1, 16, 0, 1048576, None],
    "n_predict": [0, -1, -2, 1, 1048576], "temperature": [0, 2, 2.0000001, 1e-300, 5e-324, 1, -0.0],
    "top_p": [0, 1, 1e-300, 1.0000001, 5e-324], "top_k": [0, 1, -1, 511, 512, 10**9], "min_p": [0, 1, 1e-300],
    "seed": [0, -1, 2**63 - 1, 2**64 - 1, 2**64], "presence_penalty": [2, -2, 1e-300],
    "frequency_penalty": [2, -2], "repeat_penalty": [0, 1e-300, 100], "logprobs": [True, False, 0, 5, 20, 21],
    "top_logprobs": [0, 20, 21], "n": [1, 0, 2], "stop": ["", [""], ["a"] * 64, ["a"] * 65, ["\x00"], ["<|im_end|>"]],
    "stop_sequences": [[], [""], ["a"] * 100, ["<|im_end|>"]], "logit_bias": [
        {"511": 100}, {"512": 1}, {"-1": 1}, {"0": -100}, {"5": 101}, {"5": 1e-300}, {"1": 100, "2": 100}],
    "prompt": ["", [], [0], [511], [512], [-1], [2**31], [[5, 6], [7]], ["a", "b"], [[]], [1.5], [True]],
    "tool_choice": ["none", "auto", "required", "any", {"type": "any"}, {"type": "tool", "name": "read"},
                    {"type": "function", "name": "read"}, {"type": "function", "function": {"name": "read"}},
                    {"type": "none"}, {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function",
                                                                                         "name": "read"}]},
                    {"type": "custom", "name": "patch"}, {"type": "auto", "disable_parallel_tool_use": True}],
    "response_format": [{"type": "json_object"}, {"type": "text"}, {"type": "json_schema"},
                        {"type": "json_schema", "json_schema": {"name": "x"}}] +
                       [{"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": sc}}
                        for sc in SCHEMAS],
    "schema": SCHEMAS, "parameters": SCHEMAS, "input_schema": SCHEMAS,
    "thinking": [{"type": "enabled", "budget_tokens": 0}, {"type": "enabled", "budget_tokens": 1024},
                 {"type": "enabled", "budget_tokens": 10**9}, {"type": "disabled"}, {"type": "adaptive"},
                 {"type": "enabled"}],
    "reasoning": [{"effort": "high"}, {"effort": "none"}, {"effort": "minimal"}, {"summary": "auto"}, {}],
    "reasoning_effort": ["low", "high", "none", "max"],
    "stream_options": [{"include_usage": True}, {"include_usage": False}, {}, None],
    "arguments": ["", "{", "[]", "null", "{\"path\": \"a\\ud800\"}", "{\"path\": ", "{\"path\": \"a\"}{\"n\": 1}", "\"x\""],
    "input": [{}, [], "", {"path": [1]}, None, "x"], "content": ["", [], None, [{"type": "text", "text": ""}]],
    "input_extra": [[], [{"filename": "", "text": ""}] * 2000, [{"text": "x"}], [{"filename": "a"}]],
    "t_max_prompt_ms": [0, -1, 1, 10**12], "t_max_predict_ms": [0, 1, -1], "n_indent": [0, -1, 1000],
    "chat_template_kwargs": [{"enable_thinking": True}, {"enable_thinking": "no"}, {"add_generation_prompt": False},
                             {"messages": []}, {"tools": None}],
    "slot": ["main", 0, 1, 2, 3, 99, -1, "1"], "tokens": [[1, 2], [600], [-1], [2**40]],
    "budget_tokens": [0, 1, 1023, 1024, 4096, -1], "strict": [True, False, None], "is_error": [True, "yes"],
    "suffix": ["", "\n" * 2000], "instructions": ["", None, ["x"]],
    "system": ["", [], [{"type": "text", "text": ""}], [{"type": "image"}]],
}
CONTENT_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                 "application/json; charset=latin-1", "application/xml", "", "application/json-patch+json"]


class Raw:
    """A JSON text placed as it is where a value goes (json.dumps cannot write NaN-like numbers or lone
    surrogates; dumps below writes this verbatim)."""

    def __init__(self, text: str) -> None:
        self.text = text


class Dup(dict):
    """An object written with `key` twice: first `first`, then the object's own value."""

    def __init__(self, items: dict, key: str, first: Any) -> None:
        super().__init__(items)
        self.key, self.first = key, first


def dumps(v: Any) -> str:
    """JSON of `v` with Raw texts and Dup objects written as they say."""
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, dict):
        items = [f"{json.dumps(str(k))}: {dumps(x)}" for k, x in v.items()]
        if isinstance(v, Dup):
            items.insert(0, f"{json.dumps(v.key)}: {dumps(v.first)}")
        return "{" + ", ".join(items) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(dumps(x) for x in v) + "]"
    return json.dumps(v)


def places(v: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every place inside `v` (keys and indexes from the top), containers before their contents."""
    yield prefix
    if isinstance(v, dict):
        for k, x in v.items():
            yield from places(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from places(x, prefix + (i,))


def at(body: Any, place: tuple) -> Any:
    for k in place:
        body = body[k]
    return body


def junk(rng: random.Random) -> Any:
    """A value of any type: wrong somewhere, fine elsewhere."""
    kind = rng.randrange(9)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice(NUMBERS)
    if kind == 2:
        return rng.choice(STRINGS)
    if kind == 3:
        return Raw(rng.choice(RAW_VALUES))
    if kind == 4:
        return rng.choice([[], {}, [None], [[]], [""], [{}], {"": None}, {"type": None}])
    if kind == 5:
        return rng.choice([DEEP, list(range(300)), ["s"] * 200, {str(i): i for i in range(200)}])
    if kind == 6:
        return {"type": rng.choice(PART_TYPES), rng.choice(EXTRA_KEYS): junk_leaf(rng)}
    if kind == 7:
        return [junk_leaf(rng) for _ in range(rng.randrange(1, 4))]
    return junk_leaf(rng)


def junk_leaf(rng: random.Random) -> Any:
    return rng.choice([None, True, 0, -1, 1.5, 2**64, "", "x", "\x00", "🙂", "bogus", [], {}, Raw("NaN")])


def mutate(rng: random.Random, path: str, body: dict) -> tuple[str, dict, str]:
    """One damage at a random place of a copy of `body`: (what was done, the body, path, which may change)."""
    body = copy.deepcopy(body)
    where = [p for p in places(body) if p]
    if not where:                      # every field dropped already
        body[rng.choice(EXTRA_KEYS)] = junk(rng)
        return "add to {}", body, path
    place = rng.choice(where)
    parent, key = at(body, place[:-1]), place[-1]
    value = parent[key]
    op = rng.randrange(19)
    if op == 0 and isinstance(parent, dict):
        del parent[key]
        return f"drop {place}", body, path
    if op == 1:
        target = rng.choice([p for p in places(body) if isinstance(at(body, p), dict)])
        extra = rng.choice(EXTRA_KEYS)
        at(body, target)[extra] = junk(rng)
        return f"add {target + (extra,)}", body, path
    if op == 2:
        parent[key] = rng.choice([[value], {"value": value}, [[value]], [value, value]])
        return f"nest {place}", body, path
    if op == 3:
        parent[key] = rng.choice(["", [], {}, None])
        return f"empty {place}", body, path
    if op == 4 and isinstance(value, str):
        parent[key] = rng.choice([value + rng.choice(STRINGS), rng.choice(STRINGS) + value,
                                  value[: len(value) // 2] + "\x00" + value[len(value) // 2:], value * 2000])
        return f"text {place}", body, path
    if op == 5 and isinstance(value, (int, float)) and not isinstance(value, bool):
        parent[key] = rng.choice(NUMBERS + [Raw(rng.choice(RAW_VALUES)), -value, value + 0.5, str(value)])
        return f"number {place}", body, path
    if op == 6 and isinstance(parent, dict):
        parent_obj = Dup(parent, str(key), junk(rng))
        if len(place) == 1:
            return f"duplicate {place}", parent_obj, path
        at(body, place[:-2])[place[-2]] = parent_obj
        return f"duplicate {place}", body, path
    if op == 7 and key == "role":
        parent[key] = rng.choice(ROLES)
        return f"role {place}", body, path
    if op == 8 and key == "type":
        parent[key] = rng.choice(PART_TYPES)
        return f"type {place}", body, path
    if op == 9 and key in ("id", "call_id", "tool_call_id", "tool_use_id", "name"):
        parent[key] = rng.choice(["other", "", "c1 ", "C1", "toolu_2", "call_9", "read", "patch", 1, None])
        return f"pairing {place}", body, path
    if op == 10 and isinstance(value, list) and value:
        parent[key] = rng.choice([value[::-1], value + value, value[1:], value[:-1], [value[-1]] + value,
                                  value * 30])
        return f"list {place}", body, path
    if op == 11 and path in STREAMS:
        body["stream"] = not body.get("stream", False)
        if body["stream"] and rng.random() < 0.5:
            body["stream_options"] = rng.choice([{"include_usage": True}, {"include_usage": None}, {},
                                                 {"include_obfuscation": True}, junk(rng)])
        return "stream toggled", body, path
    if op in (15, 16) and str(key) in FIELD_VALUES:
        parent[key] = copy.deepcopy(rng.choice(FIELD_VALUES[str(key)]))
        return f"value {place}", body, path
    if op == 17:                       # a known field added where the body has none
        extra = rng.choice(sorted(FIELD_VALUES))
        body[extra] = copy.deepcopy(rng.choice(FIELD_VALUES[extra]))
        return f"value ({extra!r},)", body, path
    if op == 13:                       # a field of another endpoint's body, as it is there
        other_path, other = rng.choice(VALID)
        extra = rng.choice(sorted(other))
        body[extra] = copy.deepcopy(other[extra])
        return f"graft {extra} of {other_path}", body, path
    if op == 14:                       # the whole body to another endpoint (an agent pointed at the wrong API)
        return f"sent to another endpoint than {path}", body, rng.choice(VALID)[0]
    if op == 12 and isinstance(value, dict):
        value.update({rng.choice(EXTRA_KEYS): junk(rng) for _ in range(2)})
        return f"fields {place}", body, path
    parent[key] = junk(rng)
    return f"swap {place}", body, path


def raw_cases(rng: random.Random, n: int) -> list[Case]:
    """Bodies that are not a JSON object, or not sent as one."""
    out: list[Case] = []
    fixed = [b"", b" ", b"[]", b"[{}]", b"1", b"-0", b"1e999", b"null", b"true", b'"x"', b'"\\ud800"', b"{",
             b"}", b"{]", b"{\"a\"}", b"{\"a\": }", b"{'a': 1}", b"\xff\xfe{}", b"\xef\xbb\xbf{}", b"{\"a\": \"\xff\"}",
             b"{\"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}", b"\x00" * 10, b"{}" * 2,
             b"[" * 3000 + b"]" * 3000, b"{\"a\": " * 3000 + b"1" + b"}" * 3000, b"{} x", b"NaN", b"Infinity"]
    for raw in fixed:
        path, _ = rng.choice(VALID)
        out.append(Case(path, raw, "application/json", f"raw {raw[:20]!r}"))
    while len(out) < n:
        path, body = rng.choice(VALID)
        text = dumps(body).encode()
        kind = rng.randrange(5)
        if kind == 4:                  # JSON in another Unicode encoding (RFC 7159 allowed it), a surrogate escape in it
            encoding = rng.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-8-sig"])
            spliced = dumps(mutate(rng, path, body)[1]) if rng.random() < 0.5 else text.decode()
            spliced = re.sub(r'("(?:content|text|prompt|input|input_prefix|system|instructions)": ")', r"\1\\ud800",
                             spliced, count=1)       # a lone surrogate in the first text the model reads
            out.append(Case(path, spliced.encode(encoding, "surrogatepass"), "application/json", f"in {encoding}"))
        elif kind == 0:
            cut = rng.randrange(1, len(text))
            out.append(Case(path, text[:cut], "application/json", f"truncated at {cut}"))
        elif kind == 1:
            i = rng.randrange(len(text))
            out.append(Case(path, text[:i] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"]) + text[i:],
                            "application/json", f"bad utf-8 at {i}"))
        elif kind == 2:
            out.append(Case(path, text, rng.choice(CONTENT_TYPES), "content-type"))
        else:
            out.append(Case(path, rng.choice([b"[" + text + b"]", text + b"\n" + text, b"  \n" + text + b"\n  "]),
                            "application/json", "wrapped"))
    return out


@dataclass
class Case:
    path: str
    raw: bytes
    content_type: str | None
    what: str

    def short(self) -> str:
        return f"{self.path} [{self.what}] {self.raw[:300]!r}"


def cases(seed: int, n: int) -> list[Case]:
    """`n` cases from `seed`: every valid body once, then mostly mutated bodies (one or two damages), a tenth raw."""
    rng = random.Random(seed)
    out = [Case(path, dumps(body).encode(), "application/json", "valid") for path, body in VALID]
    n_raw = max(n // 10, 1)
    while len(out) < n - n_raw:
        path, body = rng.choice(VALID)
        what = []
        for _ in range(rng.choice([1, 1, 1, 2])):
            done, body, path = mutate(rng, path, body)
            what.append(done)
        out.append(Case(path, dumps(body).encode(), "application/json", "; ".join(what)))
    return out + raw_cases(rng, n - len(out))


def api_of(path: str) -> str:
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/v1/sessions"):
        return "sessions"
    return "openai"


ALLOWED_5XX = {"sessions": {503, 507}}   # sessions: no RAM for a save (503), the folder full (507): documented


def judge(case: Case, status: int, headers: dict[str, str], text: str) -> str | None:
    """What is wrong with one answer, or None."""
    api = api_of(case.path)
    if status >= 500 and status not in ALLOWED_5XX.get(api, set()):
        return f"status {status}: {text[:400]}"
    if status >= 400:
        try:
            body = json.loads(text)
        except ValueError:
            return f"{status} not JSON: {text[:300]}"
        if api == "anthropic":
            ok = (isinstance(body, dict) and body.get("type") == "error" and isinstance(body.get("error"), dict)
                  and set(body["error"]) == {"type", "message"})
        else:
            ok = isinstance(body, dict) and isinstance(body.get("error"), dict) and \
                 set(body["error"]) == {"message", "type", "param", "code"}
        if not ok:
            return f"{status} not in {api}'s error shape: {text[:300]}"
        if not isinstance(body["error"]["message"], str) or not body["error"]["message"].strip():
            return f"{status} with no message: {text[:300]}"
        return None
    if headers.get("content-type", "").startswith("text/event-stream"):
        return stream_fault(api, text)
    try:
        strict(text)
    except ValueError as e:
        return f"{status} answer is not strict JSON ({e}): {text[:300]}"
    return None


def stream_fault(api: str, text: str) -> str | None:
    """A stream that ended without its last event, carried an error event, or a data line that is not JSON."""
    for line in text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            try:
                event = strict(line[6:])
            except ValueError as e:
                return f"stream data line is not strict JSON ({e}): {line[:300]}"
            if isinstance(event, dict) and (event.get("type") == "error" or "error" in event and
                                            event.get("type") not in ("response.failed",)):
                return f"stream carried an error: {line[:400]}"
            if isinstance(event, dict) and event.get("type") == "response.failed":
                return f"stream's response failed: {line[:400]}"
    data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    last = data[-1] if data else ""
    if last == "[DONE]":                        # OpenAI's chat and completions
        return None
    try:
        event = strict(last)
    except ValueError:
        return f"stream ended without its last event: {text[-300:]}"
    if isinstance(event, dict) and (event.get("type") in ("message_stop", "response.completed", "response.incomplete")
                                    or event.get("stop") is True):   # llama.cpp's /completion and /infill
        return None
    return f"stream ended without its last event: {text[-300:]}"


def strict(text: str) -> Any:
    """JSON as RFC 8259 has it (no NaN / Infinity, which Python's decoder alone reads)."""
    def refuse(constant: str) -> None:
        raise ValueError(f"holds {constant}")

    return json.loads(text, parse_constant=refuse)


LOG_FAULTS = ("Traceback", " ERROR ", "ERROR:", "CRITICAL")
GREEDY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0}


@dataclass
class Served:
    """`strata serve` in a subprocess on a tiny model, its output in `log`."""
    url: str
    log: Any      # pathlib.Path
    proc: Any     # subprocess.Popen


def start_serve(model: str, folder: Any, *flags: str, timeout: float = 120.0) -> Served:
    """`strata serve --port 0` on `model`, four small slots, a RAM cache, sessions and cold cache in `folder`,
    answers of 8 tokens unless a request says otherwise; waits for /health."""
    import os
    import re
    import subprocess
    import sys
    import time

    import httpx2 as httpx

    log = folder / "serve.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("STRATA_API_KEY", None)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "strata", "serve", "--no-config", "--port", "0", "--threads", "1",
             "--model", str(model), "--ctx", "4096", "--batch", "2", "--slot-ctx", "1024",
             "--max-tokens-default", "8", "--conversation-cache-mib", "16",
             "--conversation-cache-cold-dir", str(folder / "cold"), "--conversation-cache-cold-mib", "32",
             "--conversation-cache-sessions-dir", str(folder / "sessions"), *flags],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"strata serve exited with {proc.returncode}:\n{log.read_text()}")
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", log.read_text())
        if found:
            try:
                if httpx.get(found.group(1) + "/health", timeout=2).status_code == 200:
                    return Served(found.group(1), log, proc)
            except httpx.TransportError:
                pass
        time.sleep(0.1)
    proc.kill()
    raise TimeoutError(f"strata serve did not become healthy:\n{log.read_text()}")


def stop_serve(served: Served) -> None:
    import signal
    import subprocess

    served.proc.send_signal(signal.SIGINT)
    try:
        served.proc.wait(60)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        served.proc.wait(10)


def greedy_answer(url: str) -> str:
    import httpx2 as httpx

    r = httpx.post(url + "/v1/chat/completions", json=GREEDY, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def drive(served: Served, todo: list[Case], timeout: float = 60.0) -> tuple[list[str], dict[int, int]]:
    """Sends each case (one at a time) and judges its answer and the log lines it caused: (findings, count of
    answers by status). A request the client gave up on (`timeout` s) is a hang; /health is asked every 50."""
    import httpx2 as httpx

    findings: list[str] = []
    statuses: dict[int, int] = {}
    seen = len(served.log.read_bytes())
    with httpx.Client(base_url=served.url, timeout=timeout) as client:
        for i, case in enumerate(todo):
            headers = {} if case.content_type is None else {"Content-Type": case.content_type}
            try:
                r = client.post(case.path, content=case.raw, headers=headers)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                fault = judge(case, r.status_code, dict(r.headers), r.text)
            except httpx.TimeoutException:
                fault = f"no answer within {timeout} s"
            except httpx.HTTPError as e:
                fault = f"{type(e).__name__}: {e}"
            data = served.log.read_bytes()
            logged, seen = data[seen:].decode(errors="replace"), len(data)
            bad = [line for line in logged.splitlines() if any(f in line for f in LOG_FAULTS)]
            if bad:
                fault = (fault + "; " if fault else "") + "log: " + " | ".join(bad[:3])[:600]
            if fault:
                findings.append(f"{case.short()}\n    -> {fault}")
            if i % 50 == 49:
                try:
                    health = client.get("/health").status_code
                except httpx.HTTPError as e:
                    health = repr(e)
                if health != 200:
                    findings.append(f"/health {health} after case {i}: {case.short()}")
                    break
    return findings, statuses


def drive_together(served: Served, todo: list[Case], clients: int, timeout: float = 60.0,
                   abandon: float = 0.1, seed: int = 0) -> tuple[list[str], dict[int, int]]:
    """The cases sent by `clients` threads at once (the scheduler's rows and queue in play), a fraction
    `abandon` of the streamed ones closed by the client after their first piece (a user's Esc). Each answer is
    judged as in drive; the log's Traceback / ERROR lines are findings of the whole run (which case caused one
    is not known when several run), and /health is asked at the end."""
    import concurrent.futures
    import threading

    import httpx2 as httpx

    findings: list[str] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    local = threading.local()
    start = len(served.log.read_bytes())
    rng = random.Random(seed)
    leave = [rng.random() < abandon for _ in todo]

    def one(i: int) -> None:
        case = todo[i]
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=served.url, timeout=timeout)
        headers = {} if case.content_type is None else {"Content-Type": case.content_type}
        fault, status = None, None
        try:
            with local.client.stream("POST", case.path, content=case.raw, headers=headers) as r:
                status = r.status_code
                streamed = r.headers.get("content-type", "").startswith("text/event-stream")
                if streamed and leave[i] and status == 200:
                    next(r.iter_bytes(), None)      # the first piece, then the connection is closed
                else:
                    text = r.read().decode(errors="replace")
                    fault = judge(case, status, dict(r.headers), text)
        except httpx.TimeoutException:
            fault = f"no answer within {timeout} s"
        except httpx.HTTPError as e:
            fault = f"{type(e).__name__}: {e}"
        with lock:
            if status is not None:
                statuses[status] = statuses.get(status, 0) + 1
            if fault:
                findings.append(f"{case.short()}\n    -> {fault}")

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, range(len(todo))))
    try:
        health = httpx.get(served.url + "/health", timeout=timeout).status_code
    except httpx.HTTPError as e:
        health = repr(e)
    if health != 200:
        findings.append(f"/health {health} after the run")
    logged = served.log.read_bytes()[start:].decode(errors="replace")
    bad = [line for line in logged.splitlines() if any(f in line for f in LOG_FAULTS)]
    findings += [f"log: {line[:600]}" for line in bad[:20]]
    return findings, statuses
