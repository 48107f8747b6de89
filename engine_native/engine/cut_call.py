"""A tool call the length limit cut: what is left of it at the end of an answer that ended at `max_tokens`
(or the context's end), read as the APIs give such a call back.

OpenAI's chat API answers a call cut by the limit with `finish_reason: "length"` and the call's
`arguments` as far as they were written (a JSON text that does not parse); Anthropic's with
`stop_reason: "max_tokens"` and a tool_use block whose `input` holds the members written whole (the
anthropic SDK reads a streamed one so: `jiter.from_json(..., partial_mode=True)`). `read_cut_call` finds
such a call at the end of the answer's content, in the `<tool_call>` + JSON format (Hermes, Qwen 2.5,
SmolLM2 as Strata renders tools for it: chat_template.parse_tool_calls reads the whole ones);
`whole_members` is the Anthropic reading of its arguments.

Not here: whole calls (chat_template.parse_tool_calls), what the APIs make of the result (prompting.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from typing import Any

from strata.engine.call_objects import as_call

CALL_OPENERS = ("<tool_call>", "<TOOLCALL>")
# what a bare JSON call may follow (Llama 3's tag, Mistral Nemo's marker: parse_tool_calls strips them too)
BARE_CALL_PREFIXES = ("<|python_tag|>", "[TOOL_CALLS]")
_JSON = json.JSONDecoder()
# the start of a JSON call as the template writes it: {"name": "NAME", "arguments": ARGUMENTS...
_HEAD = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*(,\s*"(?:arguments|parameters)"\s*:\s*)?', re.S)
_SPACES = " \t\r\n"
# a cut opening tag counts from `<tool` / `<TOOL` on (a shorter end, `<`, `<T`, is as likely code's text),
# or as the whole answer (a demanded call's forced opening cut)
PARTIAL_OPENER_MIN = 5


def read_cut_call(content: str, offered: Collection[str],
                  is_text: Callable[[str], bool] | None = None) -> tuple[str, dict[str, Any] | None] | None:
    """(content before the call, the call or None) when `content`, the text of an answer the limit cut,
    ends inside a call block: an opening tag (or the start of one) that no closing tag follows, then
    nothing, or the start of a JSON call. The call, {"name", "arguments", "cut": True}, when its name is
    whole and one of the `offered` tools; `arguments` as far as written (whole JSON when only the closing
    tag was cut). None for the call: the limit came before its name, or it names a tool not offered (the
    markup is not an answer either way). None when the content does not end so (a block whose body is
    something else, or one that `is_text(content before it)` says is text: in a code block)."""
    start = _last_open_block(content, is_text or (lambda _: False))
    if start is None:
        return None
    opener = next((o for o in CALL_OPENERS if content.startswith(o, start)), None)
    body = content[start + len(opener):].lstrip(_SPACES) if opener else ""
    if body and not body.startswith("{"):
        return None
    return content[:start].rstrip(_SPACES), json_call(body, offered)


def read_cut_bare_call(content: str, offered: Collection[str]) -> tuple[str, list[dict[str, Any]]] | None:
    """("", calls) when `content`, the whole text of an answer the limit cut, is a bare JSON call cut (as
    parse_tool_calls reads a whole one: after an optional BARE_CALL_PREFIXES marker, in an optional
    ```` ``` ```` / ```` ```json ```` fence, a call object or a list of them, Nemo's `[TOOL_CALLS][{...}]`):
    a list's calls written whole (each read as the whole reader reads one: call_objects.as_call), then the
    cut one as json_call reads its start (the last one whole when only the list's `]` was cut). After a
    marker, or after calls written whole, the markup is not an answer: no cut call when its name is not
    whole or not offered; with neither, the content stays text then (a JSON answer, not a call), as it
    does after whole calls without a marker when the cut one's "name" is followed by another member. None
    when the content is not so: an element written whole that is no call, or a cut one that is no object
    (the list is no calls, as the whole reader reads it), or whole (not cut: read whole already, or
    malformed)."""
    body = content.lstrip(_SPACES)
    marked = False
    for prefix in BARE_CALL_PREFIXES:
        if body.startswith(prefix):
            body, marked = body[len(prefix):].lstrip(_SPACES), True
    fence = re.match(r"```(?:json)?[ \t]*\n", body)
    body = body[fence.end():].lstrip(_SPACES) if fence else body
    if fence and (calls := _fence_cut(body)) is not None:
        return "", calls
    whole: list[dict[str, Any]] = []
    if body.startswith("["):
        body = body[1:].lstrip(_SPACES)
        while True:                      # the elements written whole, each followed by its comma
            try:
                value, end = _JSON.raw_decode(body)
            except (ValueError, RecursionError):
                break                    # cut in this one (or nothing of it written)
            rest = body[end:].lstrip(_SPACES)
            call = as_call(value)
            if call is None or (rest and not rest.startswith(",")):
                return None              # an element that is no call, or the list closed (not cut) or malformed
            if not rest:
                break                    # only what follows it was cut: the last call (json_call reads it whole)
            whole.append(call)
            body = rest[1:].lstrip(_SPACES)
        if body and not body.startswith("{"):
            return None                  # an element that is no object: the list is no calls
    elif body.startswith("{"):
        try:
            _JSON.raw_decode(body)
            return None                  # whole: not cut (malformed, or read whole already)
        except (ValueError, RecursionError):
            pass
    elif body or not marked:
        return None
    call = json_call(body, offered)
    if call is None and not (marked or (whole and not _no_call(body))):
        return None
    return "", whole + ([call] if call is not None else [])


def _fence_cut(body: str) -> list[dict[str, Any]] | None:
    """The calls of a fenced block's body written whole when the limit cut only its closing fence (nothing, or
    whitespace and the start of ```` ``` ```` after the JSON): the calls the whole reader reads once the
    fence closes (a call or a list of them, each as call_objects.as_call reads it; the whole reader reads
    the block only closed, so it was the markup text). None when the body is not so."""
    try:
        value, end = _JSON.raw_decode(body)
    except (ValueError, RecursionError):
        return None
    if not "```".startswith(body[end:].strip(_SPACES)):
        return None
    calls = [as_call(v) for v in (value if isinstance(value, list) else [value])]
    return calls if calls and all(c is not None for c in calls) else None    # type: ignore[return-value]


def may_be_name(name: str, offered: Collection[str], not_in_name: str = "") -> bool:
    """Whether `name`, what a cut call's marker is followed by (up to the next marker, or the end), may be
    a tool's name as the whole readers read one: an `offered` name or the start of one, or any other with
    no space and none of `not_in_name`. Else the marker is prose's (`[TOOL_CALLS] opens a call; ...`): the
    answer's text, which the readers leave whole."""
    if any(o.startswith(name) for o in offered):
        return True
    return not any(c.isspace() or c in not_in_name for c in name)


def json_call(body: str, offered: Collection[str]) -> dict[str, Any] | None:
    """The cut call a JSON call's start `body` ({"name": "NAME", "arguments": ...) is, or None when its name
    is not whole or not one of the `offered` tools."""
    head = _HEAD.match(body)
    if head is None:
        return None
    try:
        name = json.loads(f'"{head.group(1)}"')
    except ValueError:
        return None
    if name not in offered or not (head.group(2) or _arguments_may_follow(body[head.end():])):
        return None
    written = body[head.end():] if head.group(2) else ""     # "": cut before its arguments began
    return {"name": name, "arguments": written_arguments(written), "cut": True}


def _no_call(body: str) -> bool:
    """Whether `body`, a JSON object's cut start, shows it is no call as json_call reads one: its whole
    "name" followed by another member than "arguments" / "parameters" (a JSON answer's object)."""
    head = _HEAD.match(body)
    return head is not None and not head.group(2) and not _arguments_may_follow(body[head.end():])


def _arguments_may_follow(rest: str) -> bool:
    """Whether `rest`, what follows a JSON call's name, is nothing or the start of its "arguments" /
    "parameters" key: an object with another member after the name is no call (parse_tool_calls reads one
    only with those keys) but a JSON answer whose "name" is a tool's."""
    rest = rest.lstrip(_SPACES)
    if not rest:
        return True
    key = rest[1:].strip(_SPACES)
    return rest.startswith(",") and any(k.startswith(key) for k in ('"arguments"', '"parameters"'))


def written_arguments(written: str) -> str:
    """A cut call's arguments as the OpenAI API gives them back: the text as written (trailing whitespace
    off), or the object re-serialised when it was written whole (only what follows it was cut)."""
    try:
        value, _ = _JSON.raw_decode(written)
        return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else written.rstrip(_SPACES)
    except (ValueError, RecursionError):
        return written.rstrip(_SPACES)


def _last_open_block(content: str, is_text: Callable[[str], bool]) -> int | None:
    """Where the last call block opens when nothing closes it (or where the start of an opening tag ends the
    text: PARTIAL_OPENER_MIN); None when the content does not end inside one. An opening tag that
    `is_text(content before it)` says is text opens no block."""
    at = open_block(content, is_text)
    if at is not None:
        return at
    for n in range(min(len(content), max(map(len, CALL_OPENERS)) - 1), 0, -1):
        whole = not content[:-n].strip()
        if (n >= PARTIAL_OPENER_MIN or whole) and any(o.startswith(content[-n:]) for o in CALL_OPENERS):
            return None if is_text(content[:-n]) else len(content) - n
    return None


def open_block(content: str, is_text: Callable[[str], bool]) -> int | None:
    """Where the call block that nothing closes opens, the blocks read from the first, as tool_call_blocks
    reads them (one in a code block is text: the search goes on after its tag); an opening tag, whole or
    cut, inside the open block's string is the string's, not a block of its own. None when every block
    closes. Also what an Anthropic prefill left open (prompting.open_call_block)."""
    pos = 0
    while True:
        found = [(i, o) for o in CALL_OPENERS if (i := content.find(o, pos)) >= 0]
        if not found:
            return None
        at, opener = min(found)
        if is_text(content[:at]):
            pos = at + len(opener)
            continue
        pos = _block_end(content, at + len(opener), "</" + opener[1:])
        if pos is None:
            return at


def _block_end(content: str, body: int, closer: str) -> int | None:
    """Where the block whose body starts at `body` ends, after its closing tag; None when nothing closes it.
    In a JSON body the tag counts outside the JSON strings only: a closing tag inside an argument's string
    does not close the block (as parse_tool_calls reads a whole call): a demanded call's JSON is held open
    by its automaton, so a sampled `"Rome}}...</tool_call>...` cut by the limit is still the call's string,
    and was returned as the answer's text, markup and all. Another body ends at its first closing tag."""
    json_body = content[body:].lstrip(_SPACES).startswith("{")
    i = body
    while True:
        tag, quote = content.find(closer, i), content.find('"', i) if json_body else -1
        if tag < 0:
            return None
        if quote < 0 or tag < quote:
            return tag + len(closer)
        i = _string_end(content, quote)
        if i is None:
            return None


# ----- a cut call written as key-value markup (GLM's, Seed-OSS's) -----

def markup_arguments(pairs: list[tuple[str, Any]], cut_string: tuple[str, str] | None, closed: bool) -> str:
    """A cut markup call's arguments as JSON text, as far as written: the `pairs` written whole (their values
    typed as the whole reader types them), then `cut_string` (key, the value so far) when the limit cut a
    string parameter's value (without its closing quote); the object left open (more pairs may follow)
    unless `closed` (the call's end tag was written: only what follows it was cut); "" before any pair."""
    if closed:
        return json.dumps(dict(pairs), ensure_ascii=False)
    members = [json.dumps({k: v}, ensure_ascii=False)[1:-1] for k, v in pairs]
    if cut_string is not None:
        members.append(json.dumps(cut_string[0], ensure_ascii=False) + ": "
                       + json.dumps(cut_string[1], ensure_ascii=False)[:-1])
    return "{" + ", ".join(members) if members else ""


def takes_string(schema_type: Any) -> bool:
    """Whether a parameter's schema type makes its value a string (tool_values.typed_value's reading): a
    value cut there is a cut string, any other cut value is not known yet (`12` may be `123`)."""
    names = schema_type if isinstance(schema_type, list) else [schema_type]
    return "string" in names


def cut_value(raw: str, closer: str) -> str:
    """A markup value the limit cut, `raw` as written, less an end that begins its `closer` tag (`a.py</arg_`:
    the tag was being written, where the tokenizer spells it in pieces): only what is known to be the
    value's, as far as the whole call's value goes."""
    for n in range(min(len(raw), len(closer) - 1), 0, -1):
        if closer.startswith(raw[-n:]):
            return raw[:-n]
    return raw


# ----- the members of a cut JSON object that were written whole -----

def whole_members(text: str) -> dict[str, Any]:
    """The object `text` begins, with only what was written whole: a member whose value was cut (inside a
    string, a number's `1.` or `-`, a literal, a key) is left out with its key, containers cut are closed
    where they were cut (jiter's partial_mode=True, as the anthropic SDK reads a cut tool_use input).
    {} when `text` does not begin an object."""
    text = text.lstrip(_SPACES)
    if not text.startswith("{"):
        return {}
    for end, closers in reversed(_cut_points(text)[-8:]):   # the last one nearly always reads
        try:
            value = json.loads(text[:end] + closers)
        except (ValueError, RecursionError):
            continue
        return value if isinstance(value, dict) else {}
    return {}


def _cut_points(text: str) -> list[tuple[int, str]]:
    """(end, closers): places after which `text[:end] + closers` is whole JSON: right after a container
    opened or a value written whole inside the containers open there."""
    points: list[tuple[int, str]] = []
    stack: list[list[str]] = []          # per open container: [closer, what comes next: key/colon/value/comma]
    i, n = 0, len(text)

    def closers() -> str:
        return "".join(c[0] for c in reversed(stack))

    def value_done(end: int) -> None:
        if stack:
            stack[-1][1] = "comma"
            points.append((end, closers()))

    while i < n:
        ch = text[i]
        top = stack[-1] if stack else None
        if ch in _SPACES:
            i += 1
        elif ch == '"':
            end = _string_end(text, i)
            if end is None:
                break                                # cut inside a string: it and its key are left out
            if top is not None and top[0] == "}" and top[1] == "key":
                top[1] = "colon"
            else:
                value_done(end)
            i = end
        elif ch in "{[":
            stack.append(["}" if ch == "{" else "]", "key" if ch == "{" else "value"])
            points.append((i + 1, closers()))
            i += 1
        elif ch in "}]":
            stack.pop()
            if not stack:
                points.append((i + 1, ""))
                break
            value_done(i + 1)
            i += 1
        elif ch == ":":
            top[1] = "value"
            i += 1
        elif ch == ",":
            top[1] = "key" if top[0] == "}" else "value"
            i += 1
        else:                                        # a number or a literal, whole only where it reads
            j = i
            while j < n and text[j] not in _SPACES + ",]}":
                j += 1
            try:
                json.loads(text[i:j])
            except ValueError:
                break
            value_done(j)
            i = j
    return points


def _string_end(text: str, at: int) -> int | None:
    """The index after the string that opens at `at` closes; None when the text ends inside it."""
    i = at + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    return None
