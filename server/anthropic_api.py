"""Anthropic-compatible endpoints: `POST /v1/messages` (JSON or the SDK's event stream) and
`POST /v1/messages/count_tokens`.

Anthropic messages (system, text / tool_use / tool_result blocks, tools) are converted to the chat
messages the model's template renders; the answer becomes text and tool_use blocks. `usage` follows
Anthropic's meaning: `input_tokens` are the prompt tokens read, `cache_read_input_tokens` those reused.
Not here: scheduling, templates, error rendering (errors.py via the middleware).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from typing import Any

from aiohttp import web
from strata.engine.cut_call import whole_members
from strata.server import fields as f
from strata.server.anthropic_text import (
    apart,
    document_text,
    parse_system,
    search_result_text,
    search_results_as_text,
    system_message,
    text_of_blocks,
)
from strata.server.anthropic_tools import client_run, not_run_here, warn_left_out
from strata.server.errors import APIError, error_body
from strata.server.jobrun import JobEvents, failure, open_sse, raise_if_failed, send_sse
from strata.server.jobs import Completion, Job
from strata.server.off_loop import off_loop
from strata.server.one_call import first_call_end, one_call_format
from strata.server.openai_api import parse_sampling, ready_state
from strata.server.prompting import (
    PLAIN,
    AnswerFormat,
    AnswerStream,
    answer_format,
    call_id,
    check_prompt_fits,
    conversation_key,
    fits_check,
    only_named_tool,
    open_call_block,
    reasoning_effort,
    render_chat_async,
    split_answer,
    split_prefill,
)
from strata.server.structured_output import answer_rule, json_format, shown_tools
from strata.server.thinking_budget import budget_rule, reasoning_lead
from strata.server.thinking_signature import seal, unseal
from strata.server.tool_changes import ToolChanges
from strata.server.tool_pairing import say_unpaired
from strata.server.tool_search import deferred_names, referenced_names, references_as_text, shown_and_callable

# ----- request parsing -----


MEDIA_IN_TOOL_RESULT = "[{kind} omitted: this model reads text only]"


def _tool_result_text(content: Any, where: str, tools: list[dict] | None = None) -> str:
    """A tool's result blocks as text. An image or document there (a tool that read an image file or a
    PDF) becomes a note instead of a 400: the agent did not choose it and would resend it every turn, so
    its session could not go on. (An image the user sends is still refused.) `tool_reference` blocks
    (tool search) read as the referenced tools' definitions (server/tool_search.py)."""
    if isinstance(content, list):
        content = references_as_text(search_results_as_text(content, where), tools, where)
        content = [{"type": "text", "text": MEDIA_IN_TOOL_RESULT.format(kind=b["type"])}
                   if isinstance(b, dict) and b.get("type") in ("image", "document") else b for b in content]
    return text_of_blocks(content, where)


BLOCKS = "a string or an array of content blocks"


def _tool_use(b: dict, where: str) -> dict:
    """A tool_use block as a chat tool call: `name` required, `input` an object (left out: no arguments),
    `id` a string (left out: an empty id; ids are paired in tool_pairing.py, not here)."""
    name = f.field(b, where, "name", str, "a string", required=True)
    arguments = f.field(b, where, "input", dict, "an object") or {}
    return {"id": f.field(b, where, "id", str, "a string") or "", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def _tool_result(b: dict, where: str, tools: list[dict] | None) -> dict:
    """A tool_result block as a tool message: `content` a string or blocks (left out: empty), `is_error` a
    boolean (true: the text reads 'Error: ...'), `tool_use_id` a string (left out: an empty id)."""
    result = f.field(b, where, "content", (str, list), BLOCKS)
    text = "" if result is None else result if isinstance(result, str) \
        else _tool_result_text(result, f"{where}.content", tools)
    if f.field(b, where, "is_error", bool, "a boolean"):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": f.field(b, where, "tool_use_id", str, "a string") or "", "content": text}


def parse_messages(raw: list, system: str | None, tools: list[dict] | None = None,
                   changes: ToolChanges | None = None) -> list[dict]:
    """Anthropic's messages as chat messages; `tools` (every tool of the request) are the definitions a
    `tool_reference` in a tool result reads as; `changes` takes the tool changes of system messages and
    compaction blocks, in order."""
    out: list[dict] = [{"role": "system", "content": system}] if system else []
    roles = [m.get("role") if isinstance(m, dict) else None for m in raw]
    if roles and all(r == "system" for r in roles):
        raise APIError(400, "'messages' holds only system messages: it needs a user message to answer")
    for i, (where, m) in enumerate(f.objects(raw, "messages")):
        role = m.get("role")
        if role == "system":
            sys_msg = system_message(m, where, later_user="user" in roles[i + 1:], changes=changes)
            if sys_msg is not None:
                out.append(sys_msg)
            continue
        if role not in ("user", "assistant"):
            raise APIError(400, f"{where}.role must be 'user', 'assistant' or 'system'; got {role!r}")
        content = m.get("content")
        if content is None:
            raise APIError(400, f"{where}.content is required")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise f.wrong_type(f"{where}.content", BLOCKS, content)
        text: list[str] = []
        calls: list[dict] = []
        thoughts: list[str] = []
        for bw, b in f.objects(content, f"{where}.content"):
            kind = b.get("type")
            if kind == "thinking" and role == "assistant" and isinstance(b.get("thinking"), str):
                # a thinking model's template may write it back; omitted, it is in the signature Strata wrote
                thoughts.append(b["thinking"] or unseal(b.get("signature")) or "")
            elif kind == "text":
                text.append(f.field(b, bw, "text", str, "a string", required=True))
            elif kind == "tool_use" and role == "assistant":
                calls.append(_tool_use(b, bw))
            elif kind == "search_result" and role == "user":
                text.append(apart("".join(text), search_result_text(b, bw)))
            elif kind == "document" and role == "user" and (document := document_text(b, bw)) is not None:
                text.append(apart("".join(text), document))
            elif kind == "tool_result" and role == "user":
                if text:
                    out.append({"role": "user", "content": "".join(text)})
                    text = []
                out.append(_tool_result(b, bw, tools))
            elif kind == "tool_result":     # in an assistant message: left out, the model would never read it
                raise APIError(400, f"{bw}: a tool_result block belongs in a user message (the turn after the "
                                    "assistant's tool_use), not in an assistant message")
            elif kind == "compaction" and role == "assistant" and changes is not None:
                listed = b.get("tool_changes") or []
                if not isinstance(listed, list):
                    raise APIError(400, f"{bw}.tool_changes must be an array of tool_addition / tool_removal "
                                        "blocks")
                for k, change in f.objects(listed, f"{bw}.tool_changes"):
                    changes.read(change, k)     # the summarised turns' changes: their text went with them
            elif kind in ("thinking", "redacted_thinking") or (role == "assistant" and isinstance(kind, str)
                                                                and kind not in ("text", "tool_use", "image")):
                continue    # earlier reasoning and server-side tool blocks: not part of what the model reads
            elif kind in ("image", "document"):
                what = "document blocks other than text (a PDF, a URL, a file)" if kind == "document" else "image blocks"
                raise APIError(400, f"{bw}: {what} are not supported (the model reads text only)")
            else:
                article = "an" if role == "assistant" else "a"
                raise APIError(400, f"{bw}.type {kind!r} is not valid in {article} {role} message")
        if text or calls or role == "assistant":
            msg: dict[str, Any] = {"role": role, "content": "".join(text)}
            if calls:
                msg["tool_calls"] = calls
            if thoughts:
                msg["reasoning_content"] = "\n".join(thoughts)
            out.append(msg)
    return out


TOOL_CHOICE_TYPES = ("auto", "any", "tool", "none")


def parse_tool_choice(body: dict) -> dict | None:
    """`tool_choice` checked for shape: an object whose `type` is one of TOOL_CHOICE_TYPES, and `tool`
    names a tool. (The choice cannot constrain the model's output; see parse_tools.)"""
    choice = body.get("tool_choice")
    if choice is None:
        return None
    if not isinstance(choice, dict):
        raise APIError(400, "'tool_choice' must be an object such as {\"type\": \"auto\"}")
    kind = choice.get("type")
    if kind not in TOOL_CHOICE_TYPES:
        raise APIError(400, f"'tool_choice.type' must be one of {', '.join(map(repr, TOOL_CHOICE_TYPES))}; "
                            f"got {kind!r}")
    if kind == "tool" and (not isinstance(choice.get("name"), str) or not choice["name"]):
        raise APIError(400, "'tool_choice' of type 'tool' needs a 'name': the tool to use")
    return choice


def offered_tools(body: dict) -> list[dict]:
    """Every tool of the request the model could call, as chat tools (whatever `tool_choice` says)."""
    tools = [chat_tool(t, tw) for tw, t in f.objects(f.get_list(body, "tools") or [], "tools")]
    return [t for t in tools if t is not None]


def chat_tool(t: dict, where: str) -> dict | None:
    """One `tools` entry as a chat tool: an Anthropic-defined tool the client runs (bash, the text editor)
    with the input Anthropic documents for it (anthropic_tools.py); None for one the model cannot call here
    (a server tool: web search, ...)."""
    if not isinstance(t.get("name"), str) or not t["name"]:
        raise APIError(400, f"{where}.name must be a non-empty string")
    if t.get("type") == "function" and "input_schema" not in t:   # dropped as an unknown type, uncallable
        raise APIError(400, f"{where} is an OpenAI-shaped tool (type 'function'): the Anthropic API takes "
                            "{\"name\": ..., \"description\": ..., \"input_schema\": {...}}")
    if t.get("type") not in (None, "custom") and "input_schema" not in t:
        defined = client_run(t["type"])
        if defined is None:
            warn_left_out(t["type"], t["name"])
        return None if defined is None else {"type": "function", "function": {"name": t["name"], **defined}}
    schema = f.tool_schema(t.get("input_schema"), f"{where}.input_schema")
    return {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                             "parameters": schema}}


def parse_tools(body: dict) -> list[dict] | None:
    choice = parse_tool_choice(body)
    if not f.get_list(body, "tools"):
        if choice is not None and choice["type"] == "tool":
            raise APIError(400, f"'tool_choice' names {choice['name']!r} but 'tools' is empty or missing")
        if choice is not None and choice["type"] == "any":   # a call demanded with nothing to call
            raise APIError(400, "'tool_choice' of type 'any' needs 'tools': there is nothing to call")
        return None
    out = offered_tools(body)
    if choice is not None and choice["type"] == "none":
        return None
    refuse_server_tools(body, choice, out)
    if choice is not None and choice["type"] == "tool":     # one named tool: only it is offered
        return only_named_tool(out, choice["name"])
    return out or None


def refuse_server_tools(body: dict, choice: dict | None, callable_: list[dict]) -> None:
    """400 when the answer would depend on a tool only Anthropic's servers run (web search, code execution,
    ...: anthropic_tools.NOT_RUN_HERE): `tool_choice` names one, or every tool is one (a request made for
    it, such as a web search; answered without it, the model would invent its results).
    Beside tools the client runs, such a tool is left out and the model answers with those."""
    unrun = {t.get("name"): t.get("type") for t in f.get_list(body, "tools") or []
             if isinstance(t, dict) and "input_schema" not in t and not_run_here(t.get("type"))}
    why = "Anthropic's servers run it (or it needs a model that sees screenshots); Strata cannot, the model " \
          "here calls only tools the client runs"
    if choice is not None and choice["type"] == "tool" and choice["name"] in unrun:
        raise APIError(400, f"'tool_choice' names {choice['name']!r}, a {unrun[choice['name']]} tool: {why}")
    if unrun and not callable_:
        kinds = ", ".join(sorted({str(k) for k in unrun.values()}))
        raise APIError(400, f"'tools' holds only tools Strata cannot run ({kinds}): {why}")


async def _prompt(request: web.Request, body: dict,
                  refuse_long: bool = False) -> tuple[Any, list[dict], list[dict] | None, list[int]]:
    state = ready_state(request)
    f.get_str(body, "model")
    raw = f.get_list(body, "messages", required=True, nonempty=True)
    tools = parse_tools(body)
    offered = offered_tools(body)
    changes = ToolChanges(offered, chat_tool)
    messages = parse_messages(raw, parse_system(body), offered, changes)
    say_unpaired(state.said, messages, request.path)
    choice = body.get("tool_choice") if isinstance(body.get("tool_choice"), dict) else {}
    deferred = deferred_names(body) - {choice.get("name")}     # a tool demanded by name is shown
    shown, callable_ = shown_and_callable(tools, deferred, referenced_names(raw))
    if choice.get("type") == "none":
        # every tool is written as `auto` writes them, none callable (the answer is kept off calls: held_to):
        # the prompt's start stays the conversation's, so a side request (a summary, a title) reuses its history
        shown = shown_and_callable(offered or None, deferred, referenced_names(raw))[0]
    if choice.get("type") not in ("none", "tool"):      # tool_choice's own limits stand
        callable_ = changes.callable(callable_)
    elif choice.get("type") == "tool" and callable_:
        # every tool is written all the same when the call is held to the named one by name: the prompt's
        # start stays the conversation's (a turn naming its tool read the whole history again)
        every = [t for t in offered if t["function"]["name"] not in deferred] or None
        shown = shown_tools(every, callable_, True, answer_format(state.engine, [], messages), state.engine)
    history, prefill = split_prefill(messages)
    return state, messages, callable_, await render_chat_async(state.engine, history, shown, prefill,
                                                               template_vars={**thinking_switch(body),
                                                                              **output_effort(body)},
                                                               fits=fits_check(state.engine, api="anthropic")
                                                               if refuse_long else None)


# every type the anthropic SDK sends (its ThinkingConfigParam); 'between_tools' (thinking between tool calls)
# thinks as 'enabled' does
THINKING_TYPES = ("enabled", "disabled", "adaptive", "between_tools")
MIN_THINKING_BUDGET = 1024      # Anthropic's least `budget_tokens`


def thinking_switch(body: dict) -> dict[str, Any]:
    """Template variables for `thinking`: `{"type": "disabled"}` turns a thinking model's thinking off where
    its template has the switch Qwen3's, GLM's and SmolLM3's read (`enable_thinking`); `enabled`,
    `adaptive` and `between_tools` leave the template's default (thinking). `enabled` needs `budget_tokens`
    of at least 1024, as Anthropic's API does (thinking_budget reads it), and tells the template the budget
    (`thinking_budget`: Seed-OSS's writes it into the prompt for the model to pace its reasoning by; the
    budget is enforced either way, server/thinking_budget.py)."""
    value = body.get("thinking")
    if value is None:
        return {}
    if not isinstance(value, dict) or value.get("type") not in THINKING_TYPES:
        raise APIError(400, f"'thinking' must be an object whose 'type' is {', '.join(map(repr, THINKING_TYPES[:-1]))} "
                            f"or {THINKING_TYPES[-1]!r}")
    budget = value.get("budget_tokens")
    # the value as JSON writes it (fields.shown): Python's repr said None, True, '2048' to an HTTP client
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise APIError(400, f"'thinking.budget_tokens' must be an integer, got {f.shown(budget)}",
                       param="thinking.budget_tokens")
    if value["type"] == "enabled" and budget is None:
        raise APIError(400, f"'thinking.budget_tokens' is required with type 'enabled' (an integer of at least "
                            f"{MIN_THINKING_BUDGET}, as on Anthropic's API)", param="thinking.budget_tokens")
    if value["type"] == "enabled" and budget < MIN_THINKING_BUDGET:
        raise APIError(400, f"'thinking.budget_tokens' must be at least {MIN_THINKING_BUDGET} with type 'enabled' "
                            f"(as on Anthropic's API), got {budget}", param="thinking.budget_tokens")
    if value["type"] == "enabled":
        return {"thinking_budget": budget}
    return {"enable_thinking": False} if value["type"] == "disabled" else {}


def output_effort(body: dict) -> dict[str, str]:
    """`output_config.effort` (low / medium / high / xhigh / max) as the template's `reasoning_effort`, as
    chat completions' `reasoning_effort` gives it (gpt-oss's `Reasoning: ...` line; other templates may
    ignore it); another value is a 400 naming the field."""
    config = body.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise APIError(400, "'output_config' must be an object", param="output_config")
    return reasoning_effort((config or {}).get("effort"), "output_config.effort")


def thinking_budget(body: dict) -> int | None:
    """The reasoning's budget in tokens: `budget_tokens` of an `enabled` thinking (checked by thinking_switch);
    None for the other types (Claude Code sends `adaptive` with `budget_tokens` 0: the model decides)."""
    value = body.get("thinking")
    return value["budget_tokens"] if isinstance(value, dict) and value.get("type") == "enabled" else None


def thinking_omitted(body: dict) -> bool:
    """`display: "omitted"`: the thinking block comes back without its text (its tokens are still spent)."""
    value = body.get("thinking")
    return isinstance(value, dict) and value.get("display") == "omitted"


def held_to(body: dict, tools: list[dict] | None, fmt: AnswerFormat, prefill: str, engine: Any) -> Any:
    """What the answer is held to (structured_output.answer_rule): JSON for `output_config.format` (or the
    beta's `output_format`), a prefill being its start; a call when `tool_choice` is `any` or `tool`; no call
    when it is `none` (the tools are written all the same)."""
    config = body.get("output_config")
    if config is not None and not isinstance(config, dict):
        raise APIError(400, "'output_config' must be an object", param="output_config")
    where, value = ("output_config.format", config.get("format")) if config and "format" in config \
        else ("output_format", body.get("output_format"))
    choice = body.get("tool_choice") if isinstance(body.get("tool_choice"), dict) else {}
    return answer_rule(json_format(value, where, flat=True), tools, choice.get("type") in ("any", "tool"), fmt,
                       engine, prefill=prefill, where=where,
                       shown=offered_tools(body) if choice.get("type") == "none" else None)


# ----- handlers -----

async def messages(request: web.Request) -> web.StreamResponse:
    body = await f.read_json_object(request)
    if body.get("max_tokens") is None:
        raise APIError(400, "'max_tokens' is required")
    state, msgs, tools, tokens = await _prompt(request, body, refuse_long=True)
    check_prompt_fits(state.engine, len(tokens), api="anthropic")
    sampling_body = {k: body[k] for k in ("temperature", "top_p", "top_k") if k in body}
    if "temperature" in sampling_body:
        f.get_number(body, "temperature", None, 0.0, 1.0)
    job = Job(api="anthropic", prompt=tokens, max_tokens=f.get_max_tokens(body, ("max_tokens",), None),
              sampling=parse_sampling(sampling_body), stop=f.get_stop(body, "stop_sequences", limit=64),
              conversation=conversation_key(msgs))
    model = body.get("model") or state.model_name
    mid = f"msg_{uuid.uuid4().hex[:24]}"
    choice = body.get("tool_choice") if isinstance(body.get("tool_choice"), dict) else {}
    fmt = one_call_format(answer_format(state.engine, tokens, msgs), choice.get("disable_parallel_tool_use"),
                          "tool_choice.disable_parallel_tool_use", disable=True)
    prefill = split_prefill(msgs)[1]
    job.answer_rule = await off_loop(held_to, body, tools, fmt, prefill, state.engine)
    if tools and not fmt.harmony:      # a prefill that opens a call: the answer's rest of it is read with it
        fmt = replace(fmt, call_opened=open_call_block(prefill))
    budget = thinking_budget(body)
    template = getattr(state.engine, "chat_template", None)
    job.reasoning_budget = budget_rule(budget, fmt, reasoning_lead(template, fmt.think[1])
                                       if budget is not None and template is not None and not fmt.harmony else "")
    job.call_end = first_call_end(fmt, tools)
    omitted = thinking_omitted(body)
    if f.get_bool(body, "stream"):
        return await _stream(request, state, job, model, mid, tools, fmt, omitted)
    completion, _ = await JobEvents(request, state.scheduler, job, stream=False).until_done()
    raise_if_failed(completion)
    return web.json_response(message_response(completion, model, mid, tools, fmt, omitted))


def message_response(completion: Completion, model: str, mid: str, tools: list[dict] | None,
                     fmt: AnswerFormat = PLAIN, omitted: bool = False) -> dict:
    """The message object; a thinking model's reasoning becomes a `thinking` block first (server/
    reasoning.py, harmony.py; its text left out when `omitted`); with tools offered, the model's tool calls
    become `tool_use` blocks."""
    reasoning, content, calls = split_answer(completion.text, fmt, tools, cut=completion.finish_reason == "length",
                                             stopped=completion.stop_sequence)
    blocks: list[dict] = [_thinking_block(reasoning, omitted)] if reasoning is not None else []
    blocks += [{"type": "text", "text": content}] if content or not calls else []
    blocks += [{"type": "tool_use", "id": call_id("toolu_", c), "name": c["name"],
                "input": call_input(c)} for c in calls]
    return {
        "id": mid, "type": "message", "role": "assistant", "model": model, "content": blocks,
        "stop_reason": _calls_stop_reason(completion) if calls else _stop_reason(completion),
        "stop_sequence": completion.stop_sequence, "usage": usage(completion),
        "timings": completion.timings,
    }


async def count_tokens(request: web.Request) -> web.Response:
    body = await f.read_json_object(request)
    _, _, _, tokens = await _prompt(request, body)
    return web.json_response({"input_tokens": len(tokens)})


# ----- shaping -----

def usage(c: Completion, output_tokens: int | None = None) -> dict:
    return {"input_tokens": c.prompt_tokens - c.cached_tokens,
            "output_tokens": len(c.tokens) if output_tokens is None else output_tokens,
            "cache_read_input_tokens": c.cached_tokens, "cache_creation_input_tokens": 0}


def _stop_reason(c: Completion) -> str:
    if c.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if c.stop_sequence is not None else "end_turn"


def _calls_stop_reason(c: Completion) -> str:
    """An answer with tool_use blocks: "tool_use", unless max_tokens cut it ("max_tokens", as Anthropic says):
    a call cut in the middle (Qwen3-Coder's XML parses without its closing tags) has lost arguments."""
    return "max_tokens" if c.finish_reason == "length" else "tool_use"


def call_input(call: dict) -> Any:
    """A tool_use block's input: the call's arguments; of a call the length limit cut (prompting.with_cut_call),
    the members written whole, as the anthropic SDK reads a cut stream's (cut_call.whole_members)."""
    if call.get("cut"):
        return whole_members(call["arguments"])
    try:
        value = json.loads(call["arguments"])
    except (TypeError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {"value": value}


def _thinking_block(text: str, omitted: bool = False) -> dict:
    """signature: Anthropic's proof that its own model wrote the block, which a local model cannot give:
    empty; with the text omitted, the text sealed (thinking_signature.py), for the next turn."""
    return {"type": "thinking", "thinking": "" if omitted else text, "signature": seal(text) if omitted else ""}


# Claude Code 2.1 drops a stream that sent nothing for 300 s (its stream watchdog, on by default) and
# retries; before the headers it waits longer (seen: 330 s answered, dropped after 361 s). Waiting
# in the queue (or for another request's read of the same start), reading a long prompt on a CPU, or
# generating a long tool call that is held back until it is whole can be that quiet. After this many
# seconds without another event the stream begins (message_start, its usage counting the whole prompt as
# read until the end says better) or sends a `ping` (Anthropic's keepalive, which clients skip).
PING_EVERY_S = 10.0


async def _stream(request: web.Request, state: Any, job: Job, model: str, mid: str, tools: list[dict] | None,
                  fmt: AnswerFormat = PLAIN, omitted: bool = False) -> web.StreamResponse:
    """The event sequence the SDK expects: message_start, ping, then per content block (a thinking
    block while a thinking model thinks, without thinking_deltas when `omitted`, the text, tool_use blocks)
    content_block_start, content_block_delta*, content_block_stop; message_delta, message_stop. With tools,
    text that may be a tool call is held (AnswerStream) and the calls become tool_use blocks at the end."""
    events = JobEvents(request, state.scheduler, job, keepalive_s=PING_EVERY_S)
    resp: web.StreamResponse | None = None
    answer = AnswerStream(fmt, tools)
    index, open_kind = -1, None          # the current block
    text_sent = False
    thought: list[str] = []              # the reasoning sent (omitted: sealed in the block's signature)
    last_out = time.monotonic()          # when the client last got an event

    async def start(kind: str, block: dict) -> None:
        nonlocal index, open_kind
        await stop()
        index, open_kind = index + 1, kind
        await _block_start(resp, index, block)

    async def stop() -> None:
        nonlocal open_kind
        if open_kind == "thinking" and omitted:     # the omitted text travels in the signature, as Anthropic's
            await send_sse(resp, {"type": "content_block_delta", "index": index, "delta": {
                "type": "signature_delta", "signature": seal("".join(thought))}}, "content_block_delta")
        if open_kind is not None:
            await send_sse(resp, {"type": "content_block_stop", "index": index}, "content_block_stop")
            open_kind = None

    async def text(piece: str) -> None:
        nonlocal text_sent
        if open_kind != "text":
            await start("text", {"type": "text", "text": ""})
        text_sent = True
        if piece:
            await _text_delta(resp, index, piece)

    async def send(pieces: list[tuple[str, str]]) -> None:
        nonlocal last_out
        if any(kind != "reasoning" or not omitted for kind, _ in pieces):   # omitted thinking sends nothing
            last_out = time.monotonic()
        for kind, piece in pieces:
            if kind == "reasoning":
                if open_kind != "thinking":
                    await start("thinking", _thinking_block(""))
                thought.append(piece)
                if not omitted:
                    await send_sse(resp, {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "thinking_delta", "thinking": piece}},
                                   "content_block_delta")
            else:
                await text(piece)

    try:
        async for kind, payload in events:
            if resp is None:             # started, or still queued after PING_EVERY_S (it counts as silence too)
                if kind == "done":       # ended unstarted (queued at a stop): a status the SDK retries, not a 200
                    raise_if_failed(payload)
                resp = await open_sse(request)
                cached = payload.get("cached_tokens", 0) if kind == "start" else 0
                await send_sse(resp, {"type": "message_start", "message": {
                    "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
                    "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": len(job.prompt) - cached, "output_tokens": 0,
                              "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}}},
                    "message_start")
                await send_sse(resp, {"type": "ping"}, "ping")
                last_out = time.monotonic()
            if kind != "done" and time.monotonic() - last_out >= PING_EVERY_S:
                await send_sse(resp, {"type": "ping"}, "ping")       # the prompt is being read, or a call held
                last_out = time.monotonic()
            if kind == "text":
                await send(answer.feed(payload))
            elif kind == "done":
                c: Completion = payload
                err = failure(c)
                if err is not None:      # overloaded_error for a stop's cut (retry), api_error for a failure
                    await send_sse(resp, error_body("anthropic", err.status, err.message), "error")
                    break
                pieces, rest, calls = answer.finish(c.text, cut=c.finish_reason == "length",
                                                    stopped=c.stop_sequence)
                await send(pieces)
                if rest or not (calls or text_sent):
                    await text(rest)
                await stop()
                for call in calls:
                    await start("tool_use", {"type": "tool_use", "id": call_id("toolu_", call),
                                             "name": call["name"], "input": {}})
                    await send_sse(resp, {"type": "content_block_delta", "index": index, "delta": {
                        "type": "input_json_delta", "partial_json": json.dumps(call_input(call))}},
                        "content_block_delta")
                await stop()
                reason = _calls_stop_reason(c) if calls else _stop_reason(c)
                await send_sse(resp, {"type": "message_delta",
                                      "delta": {"stop_reason": reason, "stop_sequence": c.stop_sequence},
                                      "usage": usage(c)}, "message_delta")
                await send_sse(resp, {"type": "message_stop"}, "message_stop")
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        events.close()
    return resp if resp is not None else web.Response(status=499)


async def _text_delta(resp: web.StreamResponse, index: int, text: str) -> None:
    await send_sse(resp, {"type": "content_block_delta", "index": index,
                          "delta": {"type": "text_delta", "text": text}}, "content_block_delta")


async def _block_start(resp: web.StreamResponse, index: int, block: dict) -> None:
    await send_sse(resp, {"type": "content_block_start", "index": index, "content_block": block},
                   "content_block_start")
