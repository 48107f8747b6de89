"""Anthropic's tool search, as Claude Code 2.1 uses it: a tool marked `"defer_loading": true` is not shown
to the model until a `tool_reference` block names it (in a tool's result: Claude Code's ToolSearch tool
answers `[{"type": "tool_reference", "tool_name": "WebFetch"}]`); from there on the model has read its
definition and may call it.

The template writes the request's tools once, before the conversation. A deferred tool is not added
there when it is loaded, which would change the prompt's start and make the whole history be read
again: the result that references it reads as the tool's definition, in the `<functions>` block
Claude Code's ToolSearch describes to the model. Not here: reading `tools` itself (anthropic_api).
"""

from __future__ import annotations

import json
from typing import Any

from strata.server.errors import APIError

NOT_OFFERED = "[tool {name!r} is not among this request's tools]"


SERVER_SEARCH = "tool_search_tool_"     # Anthropic's own tool search tools' type prefix (regex, bm25)


def deferred_names(body: dict) -> frozenset[str]:
    """The tools of the request marked `defer_loading`; none when the request offers Anthropic's server-side
    tool search (`tool_search_tool_regex_*`, `..._bm25_*`): it cannot run here, so no reference would ever
    load a deferred tool, and the model could not call it. Every tool is shown then."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return frozenset()
    if any(isinstance(t, dict) and isinstance(t.get("type"), str) and t["type"].startswith(SERVER_SEARCH)
           for t in tools):
        return frozenset()
    return frozenset(t["name"] for t in tools
                     if isinstance(t, dict) and t.get("defer_loading") is True and isinstance(t.get("name"), str))


def referenced_names(messages: list[dict]) -> frozenset[str]:
    """The tools named by `tool_reference` blocks in the tool results of `messages` (Anthropic's shape)."""
    names = set()
    for m in messages:
        if not isinstance(m, dict) or m.get("role") != "user" or not isinstance(m.get("content"), list):
            continue
        for block in m["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                names.update(b.get("tool_name") for b in block["content"]
                             if isinstance(b, dict) and b.get("type") == "tool_reference"
                             and isinstance(b.get("tool_name"), str))
    return frozenset(names)


def references_as_text(content: list, tools: list[dict] | None, where: str) -> list:
    """A tool result's blocks with its `tool_reference` blocks replaced, in the place of the first, by one
    text block: the referenced tools' definitions."""
    names = []
    for i, b in enumerate(content):
        if isinstance(b, dict) and b.get("type") == "tool_reference":
            if not isinstance(b.get("tool_name"), str) or not b["tool_name"]:
                raise APIError(400, f"{where}[{i}].tool_name must be a non-empty string")
            names.append(b["tool_name"])
    if not names:
        return content
    out: list[Any] = []
    for b in content:
        if not (isinstance(b, dict) and b.get("type") == "tool_reference"):
            out.append(b)
        elif names:
            out.append({"type": "text", "text": definitions_text(names, tools)})
            names = []
    return out


def definitions_text(names: list[str], tools: list[dict] | None) -> str:
    by_name = {t["function"]["name"]: t["function"] for t in tools or []}
    lines = []
    for name in dict.fromkeys(names):
        fn = by_name.get(name)
        if fn is None:
            lines.append(NOT_OFFERED.format(name=name))
            continue
        definition = {"description": fn.get("description", ""), "name": name, "parameters": fn.get("parameters", {})}
        lines.append(f"<function>{json.dumps(definition)}</function>")
    return "<functions>\n" + "\n".join(lines) + "\n</functions>"


def shown_and_callable(tools: list[dict] | None, deferred: frozenset[str],
                       referenced: frozenset[str]) -> tuple[list[dict] | None, list[dict] | None]:
    """(the tools the template writes: all but the deferred ones, the tools the model may call: those and
    the deferred ones a reference has loaded)."""
    if not tools or not deferred:
        return tools, tools
    shown = [t for t in tools if t["function"]["name"] not in deferred]
    callable_ = [t for t in tools if t["function"]["name"] not in deferred or t["function"]["name"] in referenced]
    return shown or None, callable_ or None
