"""Seed-OSS's tool calls (ByteDance Seed-OSS-36B): reading them from an answer.

Seed-OSS writes each call as a `<seed:tool_call>` block holding Qwen3-Coder's XML, `<function=NAME>` then
`<parameter=P>V</parameter>` lines and `</function>`, closed by `</seed:tool_call>`; several calls follow one
another, possibly after some text (its template, llama.cpp's models/templates/ByteDance-Seed-OSS.jinja). This
reads what llama.cpp's parser for that template reads (its Seed-OSS cases in tests/test-chat.cpp):

- `parse_seed_calls(text, types) -> (content, calls) | None`: None when the answer has no `<seed:tool_call>`.
  The content is the text before the first call (and any after the last one); each call's arguments are a
  JSON object string. A value is exactly what stands between `<parameter=P>` and `</parameter>` (the template
  writes it so: llama.cpp keeps a value's last newline, where Qwen3-Coder's values lose one at each end),
  typed by the offered tool's schema (tool_values.typed_value). A call without its closing tags (cut by the
  token limit) or whose markup does not read stays text from there on; the calls before it are kept.

- `read_cut_seed_call(text, offered, types) -> (before, call | None) | None`: the call the length limit
  cut at the end of an answer, where the whole reader's run of calls gets to, as cut_call.read_cut_call
  reads a cut `<tool_call>` JSON block (the APIs' reading of a cut call).

Not here: reasoning (`<seed:think>`: strata.server.reasoning with SEED_TAGS), rendering (the template).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from strata.engine.call_runs import read_call_run, skip_space, unread_call
from strata.engine.code_fences import first_outside_code
from strata.engine.cut_call import cut_value, markup_arguments, takes_string
from strata.engine.tool_values import typed_value

OPEN, CLOSE = "<seed:tool_call>", "</seed:tool_call>"
FUNCTION, FUNCTION_END = "<function=", "</function>"
PARAMETER, PARAMETER_END = "<parameter=", "</parameter>"


def _tag_name(text: str, pos: int, opener: str) -> tuple[str, int] | None:
    """The NAME of `<opener>NAME>` at `pos` and where the tag ends, or None (no such tag, an empty name or
    one that spans a line)."""
    if not text.startswith(opener, pos):
        return None
    end = text.find(">", pos)
    name = text[pos + len(opener):end].strip() if end >= 0 else ""
    if not name or "\n" in name or "<" in name:
        return None
    return name, end + 1


def _read_call(text: str, pos: int, types: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, str], int] | None:
    """The call whose `<seed:tool_call>` is at `pos` and where its block ends, or None when it does not
    read (cut or malformed)."""
    head = _tag_name(text, skip_space(text, pos + len(OPEN)), FUNCTION)
    if head is None:
        return None
    name, pos = head
    known = types.get(name, {})
    args: dict[str, Any] = {}
    while True:
        pos = skip_space(text, pos)
        if text.startswith(FUNCTION_END, pos):
            break
        param = _tag_name(text, pos, PARAMETER)
        if param is None:
            return None
        key, pos = param
        end = text.find(PARAMETER_END, pos)
        if end < 0:
            return None
        args[key] = typed_value(text[pos:end], known.get(key))
        pos = end + len(PARAMETER_END)
    pos = skip_space(text, pos + len(FUNCTION_END))
    if not text.startswith(CLOSE, pos):
        return None
    return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}, pos + len(CLOSE)


def parse_seed_calls(text: str, types: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[str, list[dict[str, str]]] | None:
    first = first_outside_code(text, OPEN)
    if first < 0:
        return None
    return read_call_run(text, first, OPEN, lambda t, pos: _read_call(t, pos, types or {}))


def read_cut_seed_call(text: str, offered: Collection[str],
                       types: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[str, dict[str, Any] | None] | None:
    """(content before the call, the call or None) when `text`, an answer the limit cut, ends inside a
    `<seed:tool_call>` block where the run of calls parse_seed_calls reads gets to (call_runs.unread_call:
    its first block outside a code block, or one after whole calls with nothing but whitespace between; a
    call after text that follows whole calls stays text, cut or not, as the whole reader leaves it):
    {"name", "arguments", "cut": True} when its `<function=NAME>` tag is whole and names an offered
    tool, else None (the markup is not an answer either way). The arguments as far as written, as JSON
    text (cut_call.markup_arguments): the parameters written whole, typed as the whole reader types them,
    then a string parameter's value cut as written; the object closed once `</function>` was written.
    None when the text does not end so (a block that reads whole, or whose markup is malformed)."""
    first = first_outside_code(text, OPEN)
    found = unread_call(text, first, OPEN, lambda t, pos: _read_call(t, pos, types or {})) if first >= 0 else None
    if found is None:
        return None                      # no block, every call whole, or a call after text (text)
    before, at = found
    pos = skip_space(text, at + len(OPEN))
    rest = text[pos:]
    if not rest or FUNCTION.startswith(rest) or (rest.startswith(FUNCTION) and ">" not in rest):
        return before, None              # cut before the function tag's `>`: the name not known whole
    head = _tag_name(text, pos, FUNCTION)
    if head is None:
        return None                      # malformed
    name, pos = head
    if name not in offered:
        return before, None
    known = (types or {}).get(name, {})
    pairs: list[tuple[str, Any]] = []
    cut_string = None
    while True:
        pos = skip_space(text, pos)
        if text.startswith(FUNCTION_END, pos):
            if not CLOSE.startswith(text[pos + len(FUNCTION_END):].strip()):
                return None              # something else after the function: malformed, not cut
            return before, {"name": name, "arguments": markup_arguments(pairs, None, True), "cut": True}
        param = _tag_name(text, pos, PARAMETER)
        if param is None:
            break                        # cut in a parameter's tag (or before one)
        key, pos = param
        end = text.find(PARAMETER_END, pos)
        if end < 0:
            cut_string = (key, cut_value(text[pos:], PARAMETER_END)) if takes_string(known.get(key)) else None
            break
        pairs.append((key, typed_value(text[pos:end], known.get(key))))
        pos = end + len(PARAMETER_END)
    return before, {"name": name, "arguments": markup_arguments(pairs, cut_string, False), "cut": True}
