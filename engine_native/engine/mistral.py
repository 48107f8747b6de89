"""Mistral's chat conventions (Devstral, Mistral Small 3.x, Magistral, Ministral 3, Nemo): tool calls in the
answer, and the messages their templates can render.

The answer: models with a v11+ tokenizer write each call as `[TOOL_CALLS]NAME[ARGS]{json arguments}`
(Mistral Small 3.2 with its own id: `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`), several calls one after the
other, possibly after some text, as llama.cpp's parsers read them (common/parsers/ministral3.cpp, its
FUNC_BRACKET_TAG reader; expected outputs in tests/test-chat.cpp). Nemo's `[TOOL_CALLS][{"name": ...,
"arguments": ...}]` is the bare JSON call chat_template.parse_tool_calls reads.

- `parse_mistral_calls(text) -> (content, calls) | None`: None when the text has no `[TOOL_CALLS]NAME`; the
  content is the text before the first call (and any after the last one); arguments are re-serialised JSON
  as for the other formats; an id the model wrote (`[CALL_ID]`) is the call's `id` when it is 9
  alphanumerics not repeated in the answer (the server hands it out, so the next turn renders the same
  text). A call that does not read (cut by the token limit, malformed JSON, arguments
  that are not an object or hold NaN / Infinity) stays text from there on; the calls before it are kept.
- `mistral_messages(msgs, short_ids, thinking_blocks)`: normalised messages as these templates take them:
  * `short_ids`: Nemo's and Small 3.2's templates raise unless every call id is 9 alphanumeric characters
    (Mistral's API hands out such ids); agents send back ours (`call_...`, `toolu_...`) or their own, so
    each id becomes `short_call_id(id)`, the same in the assistant's call and in its tool result, and the
    same on every turn (the rendered prefix, which the conversation cache reuses, must not change). An id
    that already is 9 alphanumerics is kept. A call without an id gets one from its place in the
    conversation, a result without one the id of the call at its place after the assistant's turn.
  * `thinking_blocks`: Ministral 3's template writes an assistant's reasoning back as `[THINK]...[/THINK]`
    from a content block of type "thinking" (llama.cpp's preparation): `reasoning_content` becomes one.
- `read_cut_mistral_call(text, offered)`: the `[TOOL_CALLS]NAME[ARGS]` call the length limit cut at the
  end of an answer, where the whole reader's run of calls gets to, as cut_call.read_cut_call reads a cut
  `<tool_call>` block (the APIs' reading; Nemo's cut list: cut_call.read_cut_bare_call).
- `keep_written_ids(calls)`: the model's own ids (Small 3.2's `[CALL_ID]`, Nemo's `"id"`) kept only where
  the server can hand them out.
- `template_traits(source) -> (short_ids, thinking_blocks)`: what a template needs, read from its source.

Not here: reasoning in the answer (`[THINK]...[/THINK]`: strata.server.reasoning MISTRAL_TAGS), tokenizing
the markup (control tokens of the tekken vocabulary, tokenizer.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from strata.engine.call_runs import read_call_run, skip_space, unread_call
from strata.engine.code_fences import first_outside_code
from strata.engine.cut_call import CALL_OPENERS, may_be_name, written_arguments

TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
ID_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
ID_LENGTH = 9
_SHORT_ID = re.compile(r"[A-Za-z0-9]{9}")
_NEEDS_SHORT_IDS = re.compile(r"length\s*!=\s*9")
_DECODER = json.JSONDecoder()


def template_traits(source: str) -> tuple[bool, bool]:
    """(short_ids, thinking_blocks) for a chat template's source."""
    short_ids = _NEEDS_SHORT_IDS.search(source) is not None
    thinking_blocks = "[THINK]" in source and "'thinking'" in source
    return short_ids, thinking_blocks


def short_call_id(call_id: str) -> str:
    """9 alphanumeric characters for any id: itself when it already is such an id, else derived from its
    SHA-256 (62**9 ids: two ids of one conversation meet with odds of about 1e-16 a pair)."""
    if _SHORT_ID.fullmatch(call_id):
        return call_id
    n = int.from_bytes(hashlib.sha256(call_id.encode("utf-8")).digest()[:8], "big")
    out = []
    for _ in range(ID_LENGTH):
        n, k = divmod(n, len(ID_CHARS))
        out.append(ID_CHARS[k])
    return "".join(out)


# ---------------------------------------------------------------------------------------------------
# messages for the template
# ---------------------------------------------------------------------------------------------------


def mistral_messages(msgs: Sequence[Mapping[str, Any]], short_ids: bool, thinking_blocks: bool) -> list[dict]:
    out: list[dict] = []
    turn_ids: list[str] = []      # the short ids of the last assistant turn's calls
    n_results = 0                 # tool results since that turn
    for i, m in enumerate(msgs):
        msg = dict(m)
        role = msg.get("role")
        if role == "assistant":
            if short_ids and msg.get("tool_calls"):
                calls = []
                for k, call in enumerate(msg["tool_calls"]):
                    given = call.get("id") if isinstance(call, Mapping) else None
                    key = given if isinstance(given, str) and given else f"strata-call-{i}-{k}"
                    calls.append({**call, "id": short_call_id(key)})
                msg["tool_calls"] = calls
                turn_ids, n_results = [c["id"] for c in calls], 0
            reasoning = msg.pop("reasoning_content", None)
            if thinking_blocks and isinstance(reasoning, str) and reasoning:
                text = msg.get("content") or ""
                msg["content"] = [{"type": "thinking", "thinking": reasoning}] + (
                    [{"type": "text", "text": text}] if text else [])
        elif role == "tool" and short_ids:
            given = msg.get("tool_call_id")
            if isinstance(given, str) and given:
                msg["tool_call_id"] = short_call_id(given)
            elif turn_ids:
                msg["tool_call_id"] = turn_ids[min(n_results, len(turn_ids) - 1)]
            else:
                msg["tool_call_id"] = short_call_id(f"strata-result-{i}")
            n_results += 1
        out.append(msg)
    return out


# ---------------------------------------------------------------------------------------------------
# calls in the answer
# ---------------------------------------------------------------------------------------------------


def keep_written_ids(calls: list[dict[str, str]]) -> None:
    """Drops the `id`s the model wrote that the server cannot hand out: not 9 alphanumerics (what the
    templates take back), or written twice in the answer."""
    ids = [c.get("id") for c in calls]
    for c in calls:
        if "id" in c and (not isinstance(c["id"], str) or not _SHORT_ID.fullmatch(c["id"])
                          or ids.count(c["id"]) > 1):
            del c["id"]


def _read_call(text: str, pos: int, offered: Collection[str] = ()) -> tuple[dict[str, str], int] | None:
    """The call whose `[TOOL_CALLS]` is at `pos` and where it ends, or None when it does not read. A name
    with a space is read only when it is an `offered` tool's ("a b": the template writes it as it is)."""
    start = pos + len(TOOL_CALLS)
    at = text.find(ARGS, start)
    if at < 0:
        return None
    head = text[start:at]
    if TOOL_CALLS in head:
        return None
    name, _, given_id = head.partition(CALL_ID)
    name = name.strip()
    if not name or (any(c.isspace() for c in name) and name not in offered):
        return None
    body = skip_space(text, at + len(ARGS))
    try:
        args, end = _DECODER.raw_decode(text, body)
    except (ValueError, RecursionError):      # cut, malformed, or nested deeper than json reads
        return None
    if not isinstance(args, dict):
        return None
    try:
        arguments = json.dumps(args, ensure_ascii=False, allow_nan=False)
    except ValueError:                        # NaN / Infinity / 1e999: Python reads them, JSON has none
        return None
    call = {"name": name, "arguments": arguments}
    if given_id.strip():
        call["id"] = given_id.strip()
    return call, end


def parse_mistral_calls(text: str, offered: Collection[str] = ()) -> tuple[str, list[dict[str, str]]] | None:
    first = first_outside_code(text, TOOL_CALLS)
    if first < 0:
        return None
    after = text[first + len(TOOL_CALLS):].lstrip()
    if not after or after[0] in "[{":
        return None                    # Nemo's JSON list (or nothing yet): the bare-call reader's
    content, calls = read_call_run(text, first, TOOL_CALLS, lambda t, pos: _read_call(t, pos, offered))
    keep_written_ids(calls)
    return content, calls


# ---------------------------------------------------------------------------------------------------
# a call the length limit cut
# ---------------------------------------------------------------------------------------------------


def read_cut_mistral_call(text: str, offered: Collection[str]) -> tuple[str, dict[str, Any] | None] | None:
    """(content before the call, the call or None) when `text`, an answer the limit cut, ends inside a
    `[TOOL_CALLS]` call, as cut_call.read_cut_call reads a cut `<tool_call>` block: the call {"name",
    "arguments" as far as written, "cut": True} when its name is whole and offered, else None (the markup is
    not an answer either way). Only where the run of calls parse_mistral_calls reads gets to
    (call_runs.unread_call: the first call, or one after whole calls with nothing but whitespace between;
    a call after text that follows whole calls stays text, cut or not, as the whole reader leaves it). The
    run opens at the first `[TOOL_CALLS]` outside a code block and before any `<tool_call>` block (whose
    strings may quote it, as parse_tool_calls reads); a later one inside the cut call is its string's.
    `NAME[ARGS]{...` (`NAME[CALL_ID]ID[ARGS]{...`): the name is whole once a marker follows it, or when it is
    an offered tool's that no other offered name goes on from; Small 3.2's ID, 9 alphanumerics, is the
    call's `id` as in a whole call (keep_written_ids: the caller drops it when a whole call has it too). None when the text does not end so (Nemo's
    `[{"name": ...` list: the bare JSON call's, cut_call.read_cut_bare_call); `[TOOL_CALLS]` is one token,
    so a cut marker is never written."""
    first = first_outside_code(text, TOOL_CALLS)
    if first < 0 or any(0 <= first_outside_code(text, o) < first for o in CALL_OPENERS):
        return None
    found = unread_call(text, first, TOOL_CALLS, lambda t, pos: _read_call(t, pos, offered))
    if found is None:
        return None                      # every call whole, or a call after text (the whole reader's text)
    before, at = found
    rest = text[at + len(TOOL_CALLS):].lstrip()
    if rest.startswith(("[", "{")):
        return None                      # Nemo's JSON list: the bare call's (cut_call.read_cut_bare_call)
    head, marker, written = rest.partition(ARGS)
    name, id_marker, given_id = head.partition(CALL_ID)
    name, given_id = name.strip(), given_id.strip()
    if not may_be_name(name, offered):
        return None                      # prose that names the marker: text, as the whole reader leaves it
    whole = bool(marker or id_marker) or not any(o != name and o.startswith(name) for o in offered)
    if TOOL_CALLS in head or not whole or name not in offered:
        return before, None
    written = written.lstrip()
    if written and not written.startswith("{"):
        return None                      # malformed, not cut: text as the whole reader leaves it
    try:
        _DECODER.raw_decode(written)
        return None                      # written whole (NaN, not an object): malformed, not cut
    except (ValueError, RecursionError):
        pass
    call = {"name": name, "arguments": written_arguments(written), "cut": True}
    # Small 3.2's id once it is 9 alphanumerics (cut before [ARGS] too: a longer one is never handed out),
    # handed out as written as for a whole call, so the next turn renders the model's own text back
    if _SHORT_ID.fullmatch(given_id):
        call["id"] = given_id
    return before, call
