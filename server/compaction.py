"""Compaction for the Responses API: what Codex asks for when its context fills up, either through
`POST /v1/responses/compact` or with a `compaction_trigger` item ending a `/v1/responses` input. The
model writes a summary of the conversation; it goes back to the client inside a `compaction` item whose
`encrypted_content` is opaque to the client (here: the summary's text, marked and base64-encoded), and
when that item comes back in a later input the summary is read out and given to the model in the
system prompt.

Not here: parsing the other input items or shaping responses (responses_api.py), scheduling.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable
from typing import Any

from strata.engine.sampling import SamplingParams
from strata.server.jobrun import JobEvents, raise_if_failed
from strata.server.jobs import Completion, Job
from strata.server.no_call_rule import no_call_rule
from strata.server.prompting import (
    AnswerFormat,
    answer_format,
    check_prompt_fits,
    fits_check,
    render_chat_async,
    split_answer,
)

SEAL = "strata-summary-v1:"
SUMMARY_MAX_TOKENS = 2048   # a summary longer than this defeats its purpose
SUMMARY_REQUEST = (
    "The conversation above is about to be compacted: it will continue from your summary alone. Write a "
    "concise summary of everything needed to go on with the work: the user's goals and requests, "
    "decisions made, files and code touched (paths and names), commands run and what they showed, errors "
    "met, and what remains to do. Write only the summary."
)
SUMMARY_HEADER = "Summary of the conversation before it was compacted:\n"


def seal(summary: str) -> str:
    return SEAL + base64.urlsafe_b64encode(summary.encode("utf-8")).decode("ascii")


def unseal(content: Any) -> str | None:
    """The summary in a compaction item this server wrote; None for anything else (another server's)."""
    if not isinstance(content, str) or not content.startswith(SEAL):
        return None
    try:
        return base64.urlsafe_b64decode(content[len(SEAL):].encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        return None


def compaction_item(summary: str) -> dict:
    return {"type": "compaction", "id": f"cmp_{uuid.uuid4().hex}", "encrypted_content": seal(summary)}


def with_summaries(messages: list[dict], summaries: list[str]) -> list[dict]:
    """The chat messages with earlier compactions' summaries at the end of the system prompt (the one
    place every template takes a block of text, whatever turn order it insists on)."""
    if not summaries:
        return messages
    text = SUMMARY_HEADER + "\n\n".join(summaries)
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": messages[0]["content"] + "\n\n" + text}] + messages[1:]
    return [{"role": "system", "content": text}] + messages


def user_items(messages: list[dict]) -> list[dict]:
    """The user messages of a compact request (its input as parsed chat messages), as output items: a
    compacted response keeps them, followed by the compaction item."""
    return [{"type": "message", "id": f"msg_{uuid.uuid4().hex}", "status": "completed", "role": "user",
             "content": [{"type": "input_text", "text": m["content"]}]} for m in messages if m["role"] == "user"]


async def summary_prompt(engine: Any, messages: list[dict], tools: list[dict] | None,
                         fits: Callable[[int], None] | None = None) -> list[int]:
    """The tokens a compaction reads: the conversation and its tools, then the summary request (what
    /v1/responses/input_tokens counts for an input ending in `compaction_trigger`)."""
    return await render_chat_async(engine, messages + [{"role": "user", "content": SUMMARY_REQUEST}], tools,
                                   fits=fits)


async def summarize(request: Any, state: Any, messages: list[dict], tools: list[dict] | None,
                    conversation: str, max_tokens: int | None) -> tuple[str, Completion, AnswerFormat]:
    """The model's summary of `messages` (greedy; the conversation's own tools kept in the prompt so that
    its history is reused from its slot), the generation's completion (usage, timings) and its format (what
    of it was reasoning: usage's reasoning_tokens)."""
    tokens = await summary_prompt(state.engine, messages, tools, fits_check(state.engine, param="input"))
    check_prompt_fits(state.engine, len(tokens), param="input")
    job = Job(api="responses", prompt=tokens, max_tokens=min(max_tokens or SUMMARY_MAX_TOKENS, SUMMARY_MAX_TOKENS),
              sampling=SamplingParams(), stop=(), conversation=conversation)
    fmt = answer_format(state.engine, tokens)
    # the summary is text: a call (a model that goes on with the work instead) would leave none, so the answer
    # is kept off calls as tool_choice none's is, the tools still written
    job.answer_rule = no_call_rule(fmt) if tools else None
    completion, _ = await JobEvents(request, state.scheduler, job, stream=False).until_done()
    raise_if_failed(completion)
    # read as text, as tool_choice none's answer is (no tool is callable): the call readers cut a call the
    # summary quotes in a code block at its end, and took a summary that was a bare JSON call for a call
    _, content, _ = split_answer(completion.text, fmt, None)
    return content.strip() or "(the model wrote no summary)", completion, fmt
