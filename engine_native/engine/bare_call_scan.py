"""Where an answer's bytes turn into the start of a bare JSON call, as chat_template.parse_tool_calls reads one
(Llama 3.1 / 3.2 / 3.3 write their calls so): the content (after a leading reasoning block) is, after
whitespace, an optional `<|python_tag|>` / `[TOOL_CALLS]` (cut_call.BARE_CALL_PREFIXES) and an optional
```` ``` ```` / ```` ```json ```` fence, a JSON object or a list of them, each a call (call_objects.as_call): a
string "name" and an "arguments" or "parameters" member.

What it is: `bare_call_scan(state, data)`, a pure step over an answer's bytes, from `bare_call_start(...)`,
that says CALLED at the byte that makes the answer's first object a call's start: its "name" member's value
opening as a string while it has an "arguments" / "parameters" key, or the closing quote of such a key while
its "name" is a string (a list is calls only when every element is one: its first is enough). FREE once
the answer cannot be one (prose, a `{` after text, a first object closed or malformed): nothing more to
watch. A JSON answer that is no call (`{"name": "Alice", "age": 3}`) is never CALLED.

What it is not: the sampler's constraint that refuses such a byte (no_call.NoCall), reading the call
(chat_template.py).
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from strata.engine.cut_call import BARE_CALL_PREFIXES

CALL_KEYS = ("arguments", "parameters")
_JSON_WS = b" \t\n\r"
_FENCE, _FENCE_INFO = "```", "json"
_STRING_STOP = re.compile(rb'["\\]')     # what ends a string's plain bytes: its quote or an escape
_WS_RUN = re.compile(r"\s+")             # str.isspace's characters (the same set, checked), as str.strip's


class Lead(NamedTuple):
    """Before the content: `data`, the answer so far, may still open a reasoning block (or the block is open:
    `think`, `data` then its last bytes, where its closing tag may begin)."""
    data: bytes
    think: bool


class Head(NamedTuple):
    """The content's start (`data`), not yet known to be a call's JSON or not."""
    data: bytes


class Json(NamedTuple):
    """Inside the call's JSON: `at` what comes next (top: `{` or `[`; list: its first element; key? / key /
    colon / value? / string / nested / literal / after: in the first object), `key` the key being written
    (raw) or the last one, `named` its "name" a string, `args` an "arguments" / "parameters" key written,
    `depth` nesting inside a value, `escaped` a backslash before this byte in a string."""
    at: str
    key: bytes = b""
    named: bool = False
    args: bool = False
    depth: int = 0
    quoted: bool = False          # inside a string within a nested value
    escaped: bool = False


FREE = "free"        # cannot be a bare call (any more): nothing to watch
CALLED = "called"    # the answer is a call's start

State = Lead | Head | Json | str


def bare_call_start(reasoning: tuple[bytes, bytes] | None = None, opened: bool = False) -> State:
    """The state before an answer's first byte: `reasoning` the tags of its reasoning block (which split_reasoning
    takes off before the calls are read), `opened` the prompt opened one."""
    if reasoning is None:
        return Head(b"")
    return Lead(b"", think=opened)


def bare_call_scan(state: State, data: bytes, reasoning: tuple[bytes, bytes] | None = None) -> State:
    """The state after `data` (FREE and CALLED stay). `reasoning`: the tags bare_call_start was given."""
    if isinstance(state, Lead):
        return _lead(state, data, reasoning)
    if isinstance(state, Head):
        return _head(state.data + data)
    i = 0
    while isinstance(state, Json) and i < len(data):
        if (state.at == "string" or state.quoted) and not state.escaped:     # a string's plain bytes at once
            end = _STRING_STOP.search(data, i)
            if end is None:
                return state
            i = end.start()
        state = _json_step(state, data[i])
        i += 1
    return state


# ----- before the JSON: the reasoning, whitespace, prefixes, a fence -----

def _lead(state: Lead, data: bytes, reasoning: tuple[bytes, bytes] | None) -> State:
    opener, closer = reasoning or (b"", b"")
    seen = state.data + data
    if state.think:                       # as split_reasoning: the content begins after the first closing tag
        at = seen.find(closer)
        if at < 0:
            return Lead(seen[max(0, len(seen) - len(closer) + 1):], think=True)
        return _head(seen[at + len(closer):])
    text, _ = _decoded(seen)
    head = text.lstrip()
    tag = opener.decode("utf-8", "replace")
    if head.startswith(tag):
        skipped = len(text[:len(text) - len(head)].encode()) + len(opener)
        return _lead(Lead(b"", think=True), seen[skipped:], reasoning)
    if tag.startswith(head):
        return Lead(_compact(seen), think=False)   # whitespace, or a start of the opening tag: not known yet
    return _head(seen)


def _head(data: bytes) -> State:
    text, _ = _decoded(data)
    at = body_start(text)
    if at is None:
        return FREE
    if at is True:
        return Head(_compact(data))
    return bare_call_scan(Json("top"), data[len(text[:at].encode()):])


def body_start(text: str) -> int | bool | None:
    """Where the JSON of a bare call begins in `text`, an answer's content so far, as parse_tool_calls strips
    its way to it (str.strip's whitespace, each BARE_CALL_PREFIXES marker in turn, a fence with no language or
    `json`): the index of its `{` or `[`; True when the text so far may still lead to one; None when it cannot."""
    i = _spaces(text, 0)
    for prefix in BARE_CALL_PREFIXES:
        if text.startswith(prefix, i):
            i = _spaces(text, i + len(prefix))
        elif prefix.startswith(text[i:]):
            return True
    if text.startswith(_FENCE, i):
        j = i + len(_FENCE)
        if text.startswith(_FENCE_INFO, j):
            j += len(_FENCE_INFO)
        elif _FENCE_INFO.startswith(text[j:]):
            return True
        i = _spaces(text, j)
    elif _FENCE.startswith(text[i:]):
        return True
    if i == len(text):
        return True
    return i if text[i] in "{[" else None


def _spaces(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _compact(data: bytes) -> bytes:
    """An undecided start (whitespace, markers, a fence, an opening tag begun) with each run of whitespace one
    space: what comes next asks only whether whitespace stands there, so the state, and each token's look at
    it, stays the size of the markup however many blank lines a model writes first."""
    text, _ = _decoded(data)
    return _WS_RUN.sub(" ", text).encode() + data[len(text.encode()):]      # an unfinished character kept


def _decoded(data: bytes) -> tuple[str, bool]:
    """(the text of `data`, whether an unfinished UTF-8 sequence ends it, left out of the text): a character the
    next token finishes may be whitespace."""
    try:
        return data.decode(), False
    except UnicodeDecodeError as e:
        if e.reason == "unexpected end of data":
            return data[:e.start].decode("utf-8", "replace"), True
        return data.decode("utf-8", "replace"), False


# ----- the first object's members -----

def _json_step(s: Json, b: int) -> Json | str:
    c = chr(b)
    if s.at == "top":
        return s._replace(at="key?") if c == "{" else s._replace(at="list") if c == "[" else FREE
    if s.at == "list":
        return s if b in _JSON_WS else s._replace(at="key?") if c == "{" else FREE
    if s.at == "key?":
        return s if b in _JSON_WS else s._replace(at="key", key=b"") if c == '"' else FREE
    if s.at == "key":
        if s.escaped or c == "\\":
            return s._replace(key=s.key + bytes([b]), escaped=not s.escaped)
        if c != '"':
            return s._replace(key=s.key + bytes([b]))
        key = _key(s.key)
        if key is None:
            return FREE                   # not a JSON string: the answer is no JSON
        args = s.args or key in CALL_KEYS
        if args and s.named and key in CALL_KEYS:
            return CALLED
        return s._replace(at="colon", key=key.encode(), args=args)
    if s.at == "colon":
        return s if b in _JSON_WS else s._replace(at="value?") if c == ":" else FREE
    if s.at == "value?":
        if b in _JSON_WS:
            return s
        named = (c == '"') if s.key == b"name" else s.named
        if named and s.args and s.key == b"name":
            return CALLED
        s = s._replace(named=named)
        if c == '"':
            return s._replace(at="string")
        return s._replace(at="nested", depth=1) if c in "{[" else s._replace(at="literal")
    if s.at == "string":
        if s.escaped or c == "\\":
            return s._replace(escaped=not s.escaped)
        return s._replace(at="after") if c == '"' else s
    if s.at == "nested":
        return _nested(s, c)
    if s.at == "literal" and not (b in _JSON_WS or c in ",}"):
        return s
    if b in _JSON_WS:
        return s._replace(at="after")
    return s._replace(at="key?") if c == "," else FREE       # `}`: the first object is closed, no call


def _nested(s: Json, c: str) -> Json:
    """A byte of an object or list value: strings skipped, brackets counted."""
    if s.quoted:
        if s.escaped or c == "\\":
            return s._replace(escaped=not s.escaped)
        return s._replace(quoted=c != '"')
    if c == '"':
        return s._replace(quoted=True)
    if c in "{[":
        return s._replace(depth=s.depth + 1)
    if c in "}]":
        return s._replace(depth=s.depth - 1, at="after" if s.depth == 1 else "nested")
    return s


def _key(raw: bytes) -> str | None:
    try:
        return json.loads(b'"' + raw + b'"')
    except (ValueError, UnicodeDecodeError):
        return None
