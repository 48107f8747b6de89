"""GLM's tool calls (Z.ai's GLM-4.5 / 4.5-Air / 4.6 / 4.7 agent models): reading them from an answer.

GLM writes each call as `<tool_call>NAME` then `<arg_key>K</arg_key><arg_value>V</arg_value>` pairs and
`</tool_call>`; GLM-4.5 / 4.6 put a newline after the name and after each tag pair, GLM-4.7 none (its
template writes `<tool_call>NAME<arg_key>...`). Several calls follow one another, possibly after some text.
This reads what llama.cpp's parser for these templates reads (common/chat-auto-parser-generator.cpp, the
tagged-arguments reader; its cases in tests/test-chat.cpp):

- `parse_glm_calls(text, types) -> (content, calls) | None`: None when the answer's first `<tool_call>` does
  not open a GLM call (Hermes' JSON or Qwen3-Coder's `<function=` inside it: other readers'). The content is
  the text before the first call (and any after the last one); each call's arguments are a JSON object
  string. A value is exactly what stands between its tags (llama.cpp trims nothing); it is a string for a
  parameter whose schema type allows one, else the JSON value it reads as (typed_value: `types` is
  tool_parameter_types of the tools offered; no schema: a number, true / false / null, an object or a list
  is that value). A call without `</tool_call>` (cut by the token limit) or whose markup does not read stays
  text from there on; the calls before it are kept.

- `read_cut_glm_call(text, offered, types) -> (before, call | None) | None`: the call the length limit cut
  at the end of an answer, where the whole reader's run of calls gets to, as cut_call.read_cut_call reads a
  cut `<tool_call>` JSON block (the APIs' reading of a cut call).

Not here: the template's messages (normalize_messages already gives tool-call arguments as the objects GLM's
templates iterate), reasoning (`<think>`: strata.server.reasoning), typing values (tool_values.py).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from strata.engine.call_runs import read_call_run, skip_space, unread_call
from strata.engine.code_fences import first_outside_code
from strata.engine.cut_call import cut_value, markup_arguments, may_be_name, takes_string
from strata.engine.tool_values import typed_value

# characters a call's name cannot hold (the whole reader's rule; the cut reader's: prose is text)
NOT_IN_NAME = "<>{}"

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_END = "<arg_key>", "</arg_key>"
VALUE, VALUE_END = "<arg_value>", "</arg_value>"


def _name_end(text: str, start: int) -> int:
    """Where the name after `<tool_call>` at `start` ends: at the first tag after it, or -1 when none
    follows (a cut call)."""
    ends = [p for p in (text.find(KEY, start), text.find(CLOSE, start)) if p >= 0]
    return min(ends) if ends else -1


def opens_glm_call(text: str, start: int) -> bool:
    """Whether the text after a `<tool_call>` (from `start`) begins a GLM call: a name, not the JSON or
    `<function=` of Hermes' and Qwen3-Coder's calls. Nothing yet (a cut answer) is not one."""
    head = text[skip_space(text, start):]
    return bool(head) and head[0] not in "{[<"


def _read_call(text: str, pos: int, types: Mapping[str, Mapping[str, Any]],
               offered: Collection[str] = ()) -> tuple[dict[str, str], int] | None:
    """The call whose `<tool_call>` is at `pos` and where it ends, or None when it does not read. A name
    with a space is read only when it is an `offered` tool's ("a b": the template writes it as it is)."""
    start = pos + len(OPEN)
    end = _name_end(text, start)
    if end < 0:
        return None
    name = text[start:end].strip()
    if not name or any(c in NOT_IN_NAME for c in name) or (any(c.isspace() for c in name) and name not in offered):
        return None
    known = types.get(name, {})
    args: dict[str, Any] = {}
    pos = end
    while True:
        pos = skip_space(text, pos)
        if text.startswith(CLOSE, pos):
            break
        if not text.startswith(KEY, pos):
            return None
        key_end = text.find(KEY_END, pos)
        if key_end < 0:
            return None
        key = text[pos + len(KEY):key_end].strip()
        pos = skip_space(text, key_end + len(KEY_END))
        if not key or not text.startswith(VALUE, pos):
            return None
        value_end = text.find(VALUE_END, pos)
        if value_end < 0:
            return None
        args[key] = typed_value(text[pos + len(VALUE):value_end], known.get(key))
        pos = value_end + len(VALUE_END)
    return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}, pos + len(CLOSE)


def parse_glm_calls(text: str, types: Mapping[str, Mapping[str, Any]] | None = None,
                    offered: Collection[str] = ()) -> tuple[str, list[dict[str, str]]] | None:
    first = first_outside_code(text, OPEN)
    if first < 0 or not opens_glm_call(text, first + len(OPEN)):
        return None
    return read_call_run(text, first, OPEN, lambda t, pos: _read_call(t, pos, types or {}, offered))


def read_cut_glm_call(text: str, offered: Collection[str],
                      types: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[str, dict[str, Any] | None] | None:
    """(content before the call, the call or None) when `text`, an answer the limit cut, ends inside a GLM
    call where the run of calls parse_glm_calls reads gets to (call_runs.unread_call: its first
    `<tool_call>` outside a code block, or one after whole calls with nothing but whitespace between; a
    call after text that follows whole calls stays text, cut or not, as the whole reader leaves it):
    {"name", "arguments", "cut": True} when its name is whole (a tag after it, or an offered tool's
    name no other offered name goes on from) and offered, else None (the markup is not an answer either
    way). The arguments as far as written, as JSON text: the pairs written whole typed as the whole reader
    types them, then a value cut inside a string parameter's (schema type "string") as the string so far
    without its closing quote; the object left open (more pairs may have followed); "" before any pair.
    None when the text does not end so (a body that is JSON or `<function=`: other readers')."""
    first = first_outside_code(text, OPEN)
    if first < 0 or (text[first + len(OPEN):].strip() and not opens_glm_call(text, first + len(OPEN))):
        return None                      # no block, or another format's (Hermes' JSON, Qwen3-Coder's)
    found = unread_call(text, first, OPEN, lambda t, pos: _read_call(t, pos, types or {}, offered))
    if found is None:
        return None                      # every call whole, or a call after text (the whole reader's text)
    before, at = found
    start = at + len(OPEN)
    if not text[start:].strip():
        return before, None              # only the opening tag
    if not opens_glm_call(text, start):
        return None                      # another format's block after the GLM calls
    end = _name_end(text, start)
    name = text[start:end if end >= 0 else len(text)].strip()
    if not may_be_name(name, offered, NOT_IN_NAME):
        return None                      # prose that names the tag: text, as the whole reader leaves it
    whole = end >= 0 or not any(o != name and o.startswith(name) for o in offered)
    if not whole or name not in offered:
        return before, None
    known = (types or {}).get(name, {})
    pairs: list[tuple[str, Any]] = []
    cut_string = None
    pos = end if end >= 0 else len(text)
    while True:
        pos = skip_space(text, pos)
        key_end = text.find(KEY_END, pos)
        if not text.startswith(KEY, pos) or key_end < 0:
            break                        # cut in a key (or before one): left out
        key = text[pos + len(KEY):key_end].strip()
        pos = skip_space(text, key_end + len(KEY_END))
        if not key or not text.startswith(VALUE, pos):
            break
        value_end = text.find(VALUE_END, pos)
        raw = text[pos + len(VALUE):value_end if value_end >= 0 else len(text)]
        if value_end < 0:
            cut_string = (key, cut_value(raw, VALUE_END)) if takes_string(known.get(key)) else None
            break
        pairs.append((key, typed_value(raw, known.get(key))))
        pos = value_end + len(VALUE_END)
    return before, {"name": name, "arguments": markup_arguments(pairs, cut_string, False), "cut": True}
