"""Tool results and tool calls of a conversation that do not pair up by id: found, accepted, and said once
per server.

OpenAI's and Anthropic's APIs refuse a result whose id no earlier call has ("messages with role 'tool'
must be a response to a preceding message with 'tool_calls'"; "unexpected `tool_use_id` found in
`tool_result` blocks") and a call left without its result ("`tool_use` ids were found without
`tool_result` blocks immediately after"). Real agents send both: a client that compacted or cut its history
keeps a result whose call went with the cut turns, and a user who interrupted a call leaves it without a
result. A 400 here would stop such a session for good (the agent resends the same history every turn), so
the conversation is rendered as it is and the server says once, at INFO, what it accepted (docs/api.md,
"Tool calls and results that do not pair up"). Works on the chat messages all three APIs normalise to
(openai_api, anthropic_api, responses_api); a field of the wrong type never gets here (a 400 there).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("strata.server")

UNKNOWN_ID = "unknown id"        # a result naming an id no earlier call has
NO_ID = "no id"                  # a result without an id (templates that need one get it empty)
UNANSWERED = "unanswered"        # a call whose id no later result names, with the conversation gone on


@dataclass(frozen=True)
class Unpaired:
    kind: str           # UNKNOWN_ID, NO_ID or UNANSWERED
    call_id: str        # the id concerned ("" for NO_ID)


def unpaired(messages: Sequence[Mapping[str, Any]]) -> list[Unpaired]:
    """The results and calls of `messages` that do not pair up, in order. A call without an id cannot be
    paired and is not listed; nor is a call in the last message (its results are still to come)."""
    out: list[Unpaired] = []
    called: set[str] = set()
    last_result = {m.get("tool_call_id"): i for i, m in enumerate(messages) if m.get("role") == "tool"}
    for i, m in enumerate(messages):
        if m.get("role") == "tool":
            cid = m.get("tool_call_id") or ""
            if not cid:
                out.append(Unpaired(NO_ID, ""))
            elif cid not in called:
                out.append(Unpaired(UNKNOWN_ID, cid))
            continue
        ids = [c.get("id") or "" for c in m.get("tool_calls") or ()]
        called.update(ids)
        if i + 1 < len(messages):
            out += [Unpaired(UNANSWERED, cid) for cid in ids if cid and last_result.get(cid, -1) < i]
    return out


WHY = {
    UNKNOWN_ID: "a tool result names the call id {id!r}, which no earlier tool call has: accepted, the model "
                "reads it as a tool's output (a client that compacted its history sends such results; OpenAI's "
                "and Anthropic's APIs refuse them)",
    NO_ID: "a tool result has no call id: accepted, templates that need one get it empty (Mistral Small "
           "3.2's: the last calls' ids in order)",
    UNANSWERED: "the tool call {id!r} has no result and the conversation goes on: accepted, rendered as it is "
                "(an agent whose user interrupted the call sends this; OpenAI's and Anthropic's APIs refuse it)",
}


def say_unpaired(said: set[str], messages: Sequence[Mapping[str, Any]], where: str) -> None:
    """Logs each kind of unpaired result or call in `messages` (a request to `where`) the first time this
    server meets it; `said` (ServerState.said) holds the kinds said already."""
    for u in unpaired(messages):
        if u.kind not in said:
            said.add(u.kind)
            log.info("%s: %s; said once per server", where, WHY[u.kind].format(id=u.call_id))
