"""Typing the argument values of tool calls written as tagged text (Qwen3-Coder's `<parameter=P>`, GLM's
`<arg_value>`), by the JSON schemas of the tools the request offered.

- `tool_parameter_types(tools)`: {tool name: {parameter: its schema type}} of OpenAI-style tools: the
  property's `type` (a name or a list of names), else the type names of its anyOf / oneOf branches (pydantic
  writes Optional[str] as anyOf string / null), "string" for an enum of strings, else None (unknown).
- `typed_value(text, schema_type)`: the value as written for a parameter whose type allows a string (unless
  it is `null` and null is allowed too), else the JSON value it reads as (no type known: only a number,
  true / false / null, an object or a list), else as written. Never NaN / Infinity, which are not JSON.

Not here: reading the calls' markup (chat_template.py for Qwen3-Coder's, glm.py for GLM's).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def tool_parameter_types(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        params = fn.get("parameters") if isinstance(fn, Mapping) else None
        props = params.get("properties") if isinstance(params, Mapping) else None
        if isinstance(props, Mapping) and isinstance(fn.get("name"), str):
            out[fn["name"]] = {k: schema_type(v) for k, v in props.items() if isinstance(v, Mapping)}
    return out


def schema_type(schema: Mapping[str, Any]) -> Any:
    if "type" in schema:
        return schema["type"]
    names = [b.get("type") for key in ("anyOf", "oneOf") if isinstance(schema.get(key), list)
             for b in schema[key] if isinstance(b, Mapping)]
    flat = [t for n in names for t in (n if isinstance(n, list) else [n]) if isinstance(t, str)]
    if flat:
        return flat
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return "string"
    return None


def typed_value(value: str, schema_type: Any) -> Any:
    names = schema_type if isinstance(schema_type, list) else [schema_type]
    types = {t for t in names if isinstance(t, str)}    # a malformed schema's type reads as unknown
    if "string" in types and not (value == "null" and "null" in types):
        return value
    try:
        parsed = json.loads(value)
        # json.loads reads NaN / Infinity and numbers past a double (1e999: inf), which json.dumps writes
        # back as NaN / Infinity: not JSON
        json.dumps(parsed, allow_nan=False)
    except (ValueError, RecursionError):
        return value
    return value if isinstance(parsed, str) else parsed
