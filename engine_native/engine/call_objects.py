"""A JSON object read as a tool call, as models write a call in JSON: `{"name": NAME, "arguments": {...}}`
(`"parameters"` for Llama 3's; Mistral Nemo's with its `"id"`). `as_call(obj)` is the one reading the
whole readers (chat_template.parse_tool_calls: `<tool_call>` blocks, bare calls and lists) and the cut
bare-call reader (cut_call.read_cut_bare_call: the calls of a list written whole before the cut one) share.

Not here: finding the JSON in an answer (chat_template.py, cut_call.py), which ids can be handed out
(mistral.keep_written_ids).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def as_call(obj: Any) -> dict[str, str] | None:
    """{"name", "arguments" (a JSON object string), "id" when written} of a call object, or None when `obj`
    is no call (no string "name", neither "arguments" nor "parameters", arguments holding NaN / Infinity)."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("name"), str):
        return None
    if "arguments" in obj:
        args = obj["arguments"]
    elif "parameters" in obj:
        args = obj["parameters"]
    else:
        return None
    # NaN / Infinity (and 1e999, read as inf) are read by json.loads and written back by json.dumps, but
    # are not JSON: a string holding them is a plain string, an object holding them is not a call
    if isinstance(args, str):
        try:
            json.dumps(json.loads(args), allow_nan=False)
        except (ValueError, RecursionError):
            args = json.dumps(args, ensure_ascii=False)  # a plain string: as a JSON string
    else:
        try:
            args = json.dumps(args, ensure_ascii=False, allow_nan=False)
        except ValueError:
            return None
    call = {"name": obj["name"], "arguments": args}
    if isinstance(obj.get("id"), str):
        call["id"] = obj["id"]       # Mistral Nemo writes its call's id (kept when it can be handed out)
    return call
