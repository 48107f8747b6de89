"""Windows paths in a hand-edited config.toml: TOML reads a backslash in a double-quoted string as an escape, so
`model = "C:\\Users\\me\\m.gguf"` is not TOML ("Invalid hex value": `\\U` begins a code point) and
`conversation_cache_cold_dir = "C:\\temp"` silently names `C:<tab>emp`. These say so, with the two spellings TOML
reads as meant. `strata setup` itself writes paths escaped (tomli_w), so only a file typed by hand has them.

Only words and checks: the readers (server/config.py, installer/config_file.py) raise their own errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

HINT = ("a Windows path in double quotes needs each \\ doubled (\"C:\\\\models\\\\m.gguf\"), or single quotes "
        "('C:\\models\\m.gguf')")
ESCAPE_ERRORS = ("Invalid hex value", "Unescaped '\\'", "Unterminated string")
AT_LINE = re.compile(r"\(at line (\d+), column \d+\)")
CONTROL = re.compile(r"[\t\n\r\b\f]")   # what \t \n \r \b \f in a path became


def backslash_hint(text: str, message: str) -> str:
    """`; HINT` when a TOML error `message` about `text` is a backslash escape on a line with a double-quoted
    backslash (a Windows path), else ""."""
    if not message.startswith(ESCAPE_ERRORS):
        return ""
    at = AT_LINE.search(message)
    lines = text.splitlines()
    line = lines[int(at.group(1)) - 1] if at and 0 < int(at.group(1)) <= len(lines) else ""
    return f"; {HINT}" if re.search(r'"[^"]*\\', line) else ""


def names_a_written_path(key: str) -> bool:
    """The keys whose value is a folder or a file to write: the cache's folders, --timeline-out."""
    return key.endswith("_dir") or key == "timeline_out"


def names_a_path(key: str) -> bool:
    """The keys whose value is a file or folder: the model and the written ones."""
    return key == "model" or names_a_written_path(key)


def escaped_paths(table: Mapping[str, Any]) -> list[str]:
    """One line per top-level path key whose string holds a tab, newline, carriage return, backspace or form
    feed: a backslash TOML took for an escape (`"C:\\temp"`, `"D:\\new"`, `"C:\\b"`)."""
    return [f"{key}: TOML read a backslash in {value!r} as an escape (a tab, a line break...); {HINT}"
            for key, value in table.items()
            if isinstance(value, str) and names_a_path(key) and CONTROL.search(value)]
