"""The text-only parts of an Anthropic request: the top-level `system` prompt (Claude Code's billing line
dropped), `role: "system"` messages inside `messages` (their tool changes read by tool_changes.py), and
arrays of text blocks. Each read fails with a 400 naming the place; nothing here knows of calls or the
template.
"""

from __future__ import annotations

from typing import Any

from strata.server import fields as f
from strata.server.errors import APIError
from strata.server.tool_changes import ToolChanges, is_tool_change


def text_of_blocks(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"{where} must be a string or an array of content blocks")
    return f.text_of_parts(content, where, text_types=("text",), media_types=("image", "document"), noun="blocks")


# Claude Code's first system line, `x-anthropic-billing-header: cc_version=...; cc_entrypoint=cli; cch=1c8b4;`:
# telemetry for Anthropic's API, whose `cch` changes on every request. Left at the top of the prompt it
# makes every turn a new prefix, so the whole history is read again each turn (vLLM, SGLang and llama.cpp
# drop or pin it too). It means nothing to the model: it is dropped.
BILLING_HEADER = "x-anthropic-billing-header:"


def _without_billing_header(text: str) -> str:
    if not text.startswith(BILLING_HEADER):
        return text
    end = text.find("\n")
    return "" if end < 0 else text[end + 1:]


def parse_system(body: dict) -> str | None:
    system = body.get("system")
    if system is None:
        return None
    if isinstance(system, str):
        return _without_billing_header(system)
    if isinstance(system, list):
        system = [dict(b, text=_without_billing_header(b["text"]))
                  if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) else b
                  for b in system]
        text_of_blocks(system, "system")          # every block is text, or a 400 naming the one that is not
        # one line break between blocks: Claude Code's "...for Claude." and "You are an interactive..."
        # would otherwise run together
        return "\n".join(b["text"] for b in system if b["text"])
    return text_of_blocks(system, "system")


def search_result_text(block: dict, where: str) -> str:
    """A `search_result` block (Anthropic's cited search results, sent by the user or a tool) as the text the
    model reads: its title, source and text blocks, then a blank line (the next block's text starts apart).
    Its citations cannot be given (the model here cites
    nothing); a 400 names a missing title or source or a block that is not text."""
    for key in ("title", "source"):
        if not isinstance(block.get(key), str):
            raise APIError(400, f"{where}.{key} must be a string")
    body = text_of_blocks(block.get("content"), f"{where}.content")
    return f"Search result: {block['title']}\nSource: {block['source']}\n{body}\n\n"


def document_text(block: dict, where: str) -> str | None:
    """A `document` block whose source is text (`{"type": "text", "data": ...}`, or `content` blocks) as the
    text the model reads: its title and context, if any, its text, then a blank line; None for a PDF, a
    URL or a file, which this server cannot read. A 400 names a source that is not an object."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise APIError(400, f"{where}.source must be an object")
    if source.get("type") == "text":
        if not isinstance(source.get("data"), str):
            raise APIError(400, f"{where}.source.data must be a string")
        body = source["data"]
    elif source.get("type") == "content":
        body = text_of_blocks(source.get("content"), f"{where}.source.content")
    else:
        return None
    head = [f"{label}: {block[key]}" for key, label in (("title", "Document"), ("context", "Context"))
            if isinstance(block.get(key), str) and block[key]]
    return "\n".join([*head, body]) + "\n\n"


def apart(before: str, text: str) -> str:
    """`text` (a search result's or a document's) to follow `before`: a paragraph of its own, as the text after
    it is (its title line ran on from the text before: 'Use these.Search result: ...')."""
    return text if not before or before.endswith("\n") else "\n\n" + text


def search_results_as_text(blocks: list, where: str) -> list:
    """`blocks` with each `search_result` block, and each `document` block of text, as a text block
    (search_result_text, document_text), apart from a text block before it."""
    out: list = []
    for i, b in enumerate(blocks):
        kind = b.get("type") if isinstance(b, dict) else None
        text = search_result_text(b, f"{where}[{i}]") if kind == "search_result" \
            else document_text(b, f"{where}[{i}]") if kind == "document" else None
        if text is not None and out and isinstance(out[-1], dict) and out[-1].get("type") == "text" \
                and isinstance(out[-1].get("text"), str):
            text = apart(out[-1]["text"], text)
        out.append(b if text is None else {"type": "text", "text": text})
    return out


CLEAR_AT = ("next_user_message", "never")


def system_message(m: dict, where: str, later_user: bool, changes: ToolChanges | None = None) -> dict | None:
    """A `role: "system"` message in `messages` (Claude Code 2.1 sends its environment and date this way,
    after the first user turn) as a system chat message; None when it has no text, or when its `clear_at`
    is "next_user_message" and a user turn follows it (Anthropic no longer shows it to the model then).
    Its `tool_addition` / `tool_removal` blocks are applied to `changes` and read as the text they give,
    after the message's own text, whatever `clear_at` says: the change holds from there on (tool_changes.py;
    without `changes` they are left out)."""
    clear_at = m.get("clear_at")
    if clear_at is not None and clear_at not in CLEAR_AT:
        raise APIError(400, f"{where}.clear_at must be one of {', '.join(map(repr, CLEAR_AT))}; got {clear_at!r}")
    content = m.get("content")
    if content is None:
        content = ""
    notes = []
    if isinstance(content, list):
        for i, b in enumerate(content):
            if is_tool_change(b) and changes is not None:
                notes.append(changes.read(b, f"{where}.content[{i}]"))
        # an empty text in each change's place: a bad block after it is still named by its own index
        content = [{"type": "text", "text": ""} if is_tool_change(b) else b for b in content]
    text = text_of_blocks(content, f"{where}.content")
    if clear_at == "next_user_message" and later_user:
        text = ""
    text = "\n\n".join(t for t in (text, *notes) if t)
    return {"role": "system", "content": text} if text else None
