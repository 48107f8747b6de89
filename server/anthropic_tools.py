"""Anthropic-defined tools: a `tools` entry with a versioned `type` and no `input_schema`
(`{"type": "bash_20250124", "name": "bash"}`). Those the client runs (bash, the text editor, memory) get
the input Anthropic documents for them, so the model here can call them and the client runs the call;
those Anthropic's servers run (web search and fetch, code execution, tool search) or that need a model
that sees screenshots (computer, browser) cannot run here. Pure: knows nothing of requests or templates.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("strata.server")

_TEXT = {"type": "string"}
_LINE_RANGE = {"type": "array", "items": {"type": "integer"},
               "description": "[first, last] line to view, 1-based; last -1 for the end of the file"}

BASH = {
    "description": "Run a command in a bash shell the client keeps open: its working directory and variables "
                   "persist between calls. Set restart to true to start a fresh shell.",
    "parameters": {"type": "object", "properties": {
        "command": {"type": "string", "description": "The command to run"},
        "restart": {"type": "boolean", "description": "Restart the shell instead of running a command"}}},
}

TEXT_EDITOR = {
    "description": "View, create and edit text files. view shows a file with line numbers (or a directory's "
                   "files); create writes file_text to a new file; str_replace replaces old_str, which must "
                   "appear exactly once, with new_str; insert puts new_str after line insert_line (0: at the "
                   "start).",
    "parameters": {"type": "object", "properties": {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert"]},
        "path": {"type": "string", "description": "The file or directory"},
        "file_text": _TEXT, "old_str": _TEXT, "new_str": _TEXT,
        "insert_line": {"type": "integer"}, "view_range": _LINE_RANGE},
        "required": ["command", "path"]},
}

MEMORY = {
    "description": "Keep notes across conversations in the /memories directory: view, create, str_replace, "
                   "insert, delete and rename files there.",
    "parameters": {"type": "object", "properties": {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "delete", "rename"]},
        "path": {"type": "string"}, "file_text": _TEXT, "old_str": _TEXT, "new_str": _TEXT,
        "insert_line": {"type": "integer"}, "insert_text": _TEXT, "old_path": _TEXT, "new_path": _TEXT,
        "view_range": _LINE_RANGE},
        "required": ["command"]},
}

# type prefix -> the tool the client runs (the type's date says which version; the input is the same)
CLIENT_RUN: dict[str, dict[str, Any]] = {"bash_": BASH, "text_editor_": TEXT_EDITOR, "memory_": MEMORY}
# type prefixes of tools this server cannot run: Anthropic's servers run them, or they need screenshots
NOT_RUN_HERE = ("web_search_", "web_fetch_", "code_execution_", "tool_search_tool_", "computer_", "browser_")


def client_run(kind: Any) -> dict[str, Any] | None:
    """{description, parameters} of an Anthropic-defined tool the client runs, or None."""
    if not isinstance(kind, str):
        return None
    return next((tool for prefix, tool in CLIENT_RUN.items() if kind.startswith(prefix)), None)


def warn_left_out(kind: Any, name: str) -> None:
    """Logs, once per type and process, that a tool of a type this server does not know is left out: a 400
    could break an agent whose newer tool type the model can do without, silence would hide it. The types
    come from clients: WARNED_TYPES_MAX of them are remembered and said (each cut to SHOWN_CHARS), then one
    line says the others are not (a new made-up type each request grew the set and the log for good)."""
    if not isinstance(kind, str) or kind in _WARNED or not_run_here(kind) or _CAP_SAID:
        return
    if len(_WARNED) == WARNED_TYPES_MAX:
        _CAP_SAID.append(True)
        log.warning("Anthropic tools of %d types Strata does not know were left out; others are left out too, "
                    "not said", WARNED_TYPES_MAX)
        return
    _WARNED.add(kind)
    log.warning("Anthropic tool %r has a type Strata does not know (%r) and no input_schema: it is left out, "
                "the model cannot call it (a tool with an input_schema is offered whatever its type)",
                _cut(name), _cut(kind))


WARNED_TYPES_MAX = 16
SHOWN_CHARS = 80
_WARNED: set[str] = set()
_CAP_SAID: list[bool] = []      # not empty once the cap's line was said


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "..."


def not_run_here(kind: Any) -> bool:
    """Whether a tool of this type is one neither the client nor this server can run (a server tool)."""
    return isinstance(kind, str) and kind.startswith(NOT_RUN_HERE)
