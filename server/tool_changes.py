"""Anthropic's mid-conversation tool changes (beta `mid-conversation-tool-changes-2026-07-01`, which Claude
Code 2.1 sends; `inline-tools-2026-09-15` for a tool defined by value): `tool_addition` and `tool_removal`
blocks in a `role: "system"` message of `messages` offer a tool, or withdraw one, from that point of the
conversation on; a `compaction` block's `tool_changes` stand for those of the turns it summarised.

The template writes the request's `tools` once, before the conversation: changing that list would change
the prompt's start and make the whole history be read again. So the list stays as the request gives it,
and each change reads, where its system message stands, as text: an added tool as its definition in the
`<functions>` block tool search uses (tool_search.py), a withdrawn one as a line saying not to call it.
The tools the model may call (a demanded call, the answer's reader) are the request's with every change
applied in order. MCP references (`mcp_tool_reference`, `mcp_toolset_reference`) name tools Anthropic's
MCP connector runs, not the model here: they change nothing.

Not here: reading the rest of a system message (anthropic_text.py), the request's tools (anthropic_api).
"""

from __future__ import annotations

from typing import Any

from strata.server.errors import APIError
from strata.server.tool_search import definitions_text

TOOL_CHANGE_BLOCKS = ("tool_addition", "tool_removal")
MCP_REFERENCES = ("mcp_tool_reference", "mcp_toolset_reference")
TOOL_KINDS = ("tool_reference", "tool_definition", *MCP_REFERENCES)
ADDED = "These tools are available from now on:\n{definitions}"
REMOVED = "The tool {name!r} is no longer available: do not call it."


def is_tool_change(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in TOOL_CHANGE_BLOCKS


class ToolChanges:
    """The tools of one request as its tool changes leave them, read in the order of the messages.
    `tools` are the request's (chat function shape), `convert(entry, where)` turns a `tools` entry into
    one (None for a tool the model cannot run: a server tool)."""

    def __init__(self, tools: list[dict] | None, convert: Any) -> None:
        self._convert = convert
        self.known: dict[str, dict] = {t["function"]["name"]: t for t in tools or []}   # by name: declared
        self.changed: dict[str, bool] = {}      # name -> offered after the changes read so far

    def read(self, block: dict, where: str) -> str:
        """Applies one `tool_addition` / `tool_removal` block; the text the model reads in its place
        ("" for a change of nothing it can call)."""
        if block.get("type") not in TOOL_CHANGE_BLOCKS:
            raise APIError(400, f"{where}.type must be one of {', '.join(TOOL_CHANGE_BLOCKS)}; got {block.get('type')!r}")
        tool = block.get("tool")
        if not isinstance(tool, dict) or tool.get("type") not in TOOL_KINDS:
            raise APIError(400, f"{where}.tool must be an object whose type is one of {', '.join(TOOL_KINDS)}")
        if tool["type"] in MCP_REFERENCES:
            return ""
        adding = block["type"] == "tool_addition"
        if tool["type"] == "tool_definition":
            if not adding:
                raise APIError(400, f"{where}.tool: a tool_removal names its tool by a tool_reference")
            entry = tool.get("definition")
            if not isinstance(entry, dict):
                raise APIError(400, f"{where}.tool.definition must be an object (a 'tools' entry)")
            converted = self._convert(entry, f"{where}.tool.definition")
            if converted is None:
                return ""
            name = converted["function"]["name"]
            self.known[name] = converted
        else:
            name = tool.get("name")
            if not isinstance(name, str) or not name:
                raise APIError(400, f"{where}.tool.name must be a non-empty string")
            if name not in self.known:
                raise APIError(400, f"{where}.tool.name {name!r} names no tool of 'tools' nor one an earlier "
                                    "tool_addition defined")
        self.changed[name] = adding
        if adding:
            return ADDED.format(definitions=definitions_text([name], [self.known[name]]))
        return REMOVED.format(name=name)

    def callable(self, tools: list[dict] | None) -> list[dict] | None:
        """`tools` (what the model could call without the changes) with the changes applied: withdrawn
        tools out, added ones in."""
        out = [t for t in tools or [] if self.changed.get(t["function"]["name"], True)]
        have = {t["function"]["name"] for t in out}
        out += [self.known[n] for n, offered in self.changed.items() if offered and n not in have]
        return out or None
