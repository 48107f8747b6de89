"""OpenAI's Responses API, `POST /v1/responses`: what Codex CLI speaks (it dropped Chat Completions).

Stateless: every request carries its whole conversation in `input` (Codex sends `store: false`), so
`previous_response_id` is refused with a message that says so. Input items (messages, `function_call`,
`function_call_output`, `custom_tool_call`, `custom_tool_call_output`; a `reasoning` item's text goes
with the next assistant turn) become the chat messages the model's template renders, as in openai_api;
the answer becomes a thinking model's `reasoning` item (reasoning.py), a `message` item and
`function_call` / `custom_tool_call` items. Function tools are offered as they are; a custom
(freeform) tool as a function of one string argument, `input`; other tool types (web search, ...) are
left out, the model cannot run them. Streaming sends the event sequence the SDK checks:
response.created, response.in_progress, per item output_item.added / its deltas / output_item.done,
then response.completed (or response.incomplete at the token limit, response.failed on an error).

Not here: scheduling, templates, error rendering (errors.py via the middleware).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from strata.server import compaction
from strata.server import fields as f
from strata.server.errors import APIError
from strata.server.jobrun import JobEvents, failed, open_sse, raise_if_failed, send_sse
from strata.server.jobs import Completion, Job
from strata.server.off_loop import off_loop
from strata.server.one_call import first_call_end, one_call_format
from strata.server.openai_api import (
    CONTENT,
    MAX_TOP_LOGPROBS,
    parse_sampling,
    ready_state,
    refuse_moderation,
    tool_output_text,
)
from strata.server.openai_api import conversation_of as _conversation
from strata.server.prompting import (
    PLAIN,
    AnswerFormat,
    AnswerStream,
    answer_format,
    call_id,
    check_prompt_fits,
    fits_check,
    only_named_tool,
    only_named_tools,
    reasoning_effort,
    reasoning_tokens,
    render_chat_async,
    split_answer,
)
from strata.server.responses_echo import echoed_fields
from strata.server.structured_output import JsonFormat, answer_rule, json_format, shown_tools
from strata.server.text_logprobs import TokenText
from strata.server.tool_pairing import say_unpaired

log = logging.getLogger("strata.server")

ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
SKIPPED_ITEMS = ("web_search_call", "file_search_call", "image_generation_call")
TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
MEDIA_PARTS = ("input_image", "input_file", "input_audio")
CUSTOM_INPUT = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
LOGPROBS_INCLUDE = "message.output_text.logprobs"

# ----- request parsing -----


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return f.text_of_parts(content, where, text_types=TEXT_PARTS, media_types=MEDIA_PARTS, noun="parts")
    raise f.wrong_type(where, CONTENT, content)


def _call(item: dict, where: str) -> dict:
    """A function_call / custom_tool_call item as a chat tool call: `name` required; `arguments` JSON text
    (a custom call's `input` text: {"input": ...}); `call_id` a string; either left out reads as none."""
    name = f.field(item, where, "name", str, "a string", required=True)
    if not name:
        raise APIError(400, f"{where}.name must be a non-empty string", param=f"{where}.name")
    if item.get("type") == "function_call":
        arguments = f.field(item, where, "arguments", str, "a string (JSON text)")
        arguments = "{}" if arguments is None else arguments
    else:
        arguments = json.dumps({"input": f.field(item, where, "input", str, "a string") or ""})
    return {"id": f.field(item, where, "call_id", str, "a string") or "", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def parse_input(body: dict) -> list[dict]:
    """`instructions` and `input` as chat messages (system, user, assistant with tool_calls, tool); an
    earlier compaction's summary goes into the system prompt (compaction.py); a final
    `compaction_trigger` item is left for the caller (`wants_compaction`)."""
    out: list[dict] = []
    summaries: list[str] = []
    instructions = f.get_str(body, "instructions")
    if instructions:
        out.append({"role": "system", "content": instructions})
    raw = body.get("input")
    if isinstance(raw, str):
        if not raw:
            raise APIError(400, "'input' must not be empty", param="input")
        return out + [{"role": "user", "content": raw}]
    items = f.get_list(body, "input", required=True, nonempty=True)
    thought: str | None = None     # a reasoning item's text, for the assistant turn after it
    for where, item in f.objects(items, "input"):
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None   # [1] is no key
            if role is None:
                raise APIError(400, f"{where}.role must be one of {', '.join(ROLES)}; got {item.get('role')!r}",
                               param="input")
            if item.get("content") is None:
                raise APIError(400, f"{where}.content is required", param=f"{where}.content")
            out.append({"role": role, "content": _text(item["content"], f"{where}.content")})
            if role == "assistant" and thought is not None:
                out[-1]["reasoning_content"], thought = thought, None
        elif kind in ("function_call", "custom_tool_call"):
            call = _call(item, where)
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":      # calls of one answer
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
            if thought is not None:
                out[-1]["reasoning_content"], thought = thought, None
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if item.get("output") is None:
                raise APIError(400, f"{where}.output is required", param=f"{where}.output")
            out.append({"role": "tool", "tool_call_id": f.field(item, where, "call_id", str, "a string") or "",
                        "content": tool_output_text(item["output"], f"{where}.output", TEXT_PARTS, MEDIA_PARTS)})
        elif kind == "compaction":
            summary = compaction.unseal(item.get("encrypted_content"))
            if summary is None:
                log.warning("%s: a compaction item another server wrote (its content is opaque here): skipped",
                            where)
            else:
                summaries.append(summary)
        elif kind == "compaction_trigger":
            if where != f"input[{len(items) - 1}]":
                raise APIError(400, f"{where}: a compaction_trigger must be the last input item", param="input")
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []     # the text, else its summary
            parts = parts if isinstance(parts, list) else []
            thought = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
        elif kind in SKIPPED_ITEMS:
            continue      # hosted tools' records: not what the model reads
        elif kind == "item_reference":
            raise APIError(400, f"{where}: item references need stored responses, which this server does not "
                                "keep; send the items themselves", param="input")
        else:
            raise APIError(400, f"{where}.type {kind!r} is not supported (message, function_call, "
                                "function_call_output, custom_tool_call, custom_tool_call_output, reasoning, "
                                "compaction, compaction_trigger)", param="input")
    if not any(m["role"] != "system" for m in out):
        raise APIError(400, "'input' has no user, assistant or tool item", param="input")
    return compaction.with_summaries(out, summaries)


def wants_compaction(body: dict) -> bool:
    items = body.get("input")
    return isinstance(items, list) and bool(items) and isinstance(items[-1], dict) and \
        items[-1].get("type") == "compaction_trigger"


def parse_tools(body: dict) -> tuple[list[dict] | None, set[str]]:
    """(the tools offered to the model as functions, the names of the custom ones)."""
    tools = f.get_list(body, "tools")
    out, custom = function_tools(body)
    choice = body.get("tool_choice")
    _refuse_hosted_only(tools or [], choice, out)
    named = _named_tool(choice) if isinstance(choice, dict) and choice.get("type") in ("function", "custom") else None
    if choice == "none" or not out:
        if isinstance(choice, dict) and choice.get("name"):
            raise APIError(400, "'tool_choice' names a tool but 'tools' offers none the model can call",
                           param="tool_choice")
        if choice == "required" and not out:   # a call demanded with nothing to call
            raise APIError(400, "'tool_choice' is 'required' but 'tools' offers none the model can call",
                           param="tool_choice")
        if choice not in (None, "none", "auto") and not isinstance(choice, dict):   # junk, echoed in the answer
            raise APIError(400, "'tool_choice' must be 'none', 'auto', 'required' or an object", param="tool_choice")
        return None, custom
    if named is not None:
        return only_named_tool(out, named), custom
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        return _allowed_tools(out, choice), custom
    if choice is not None and choice not in ("auto", "required") and not isinstance(choice, dict):
        raise APIError(400, "'tool_choice' must be 'none', 'auto', 'required' or an object", param="tool_choice")
    return out, custom


HOSTED_WHY = "OpenAI's servers run it; Strata cannot, the model here calls only function tools the client runs"
# tool types the client runs whose calls this server does not write (shell_call, apply_patch_call items, a
# namespace's calls): not hosted, so the 400 must not say OpenAI's servers run them
CLIENT_RUN_TYPES = ("shell", "local_shell", "apply_patch", "namespace")
CLIENT_RUN_WHY = ("the client runs it, but the model here writes only function calls (no shell, apply_patch or "
                  "namespaced calls); offer it as a function tool")


def function_tools(body: dict) -> tuple[list[dict], set[str]]:
    """(every tool of the request the model could call, as chat functions, whatever `tool_choice` says; the
    names of the custom ones)."""
    tools = f.get_list(body, "tools")
    out: list[dict] = []
    custom: set[str] = set()
    for tw, t in f.objects(tools or [], "tools"):
        kind = t.get("type")
        if kind not in ("function", "custom"):
            continue      # hosted tools (web search, ...) and CLIENT_RUN_TYPES: the model cannot call them
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise APIError(400, f"{tw}.name must be a non-empty string", param="tools")
        if kind == "custom":
            custom.add(t["name"])
            params: Any = CUSTOM_INPUT
        else:
            params = f.tool_schema(t.get("parameters") or None, f"{tw}.parameters")
        out.append({"type": "function", "function": {"name": t["name"], "description": t.get("description") or "",
                                                      "parameters": params}})
    return out, custom


def _why_not_run(kinds: list[str]) -> str:
    """'(web_search): OpenAI's servers run it ...; (shell): the client runs it, ...' for these tool types."""
    hosted = [k for k in kinds if k not in CLIENT_RUN_TYPES]
    client = [k for k in kinds if k in CLIENT_RUN_TYPES]
    return "; ".join([f"({', '.join(hosted)}): {HOSTED_WHY}"] * bool(hosted)
                     + [f"({', '.join(client)}): {CLIENT_RUN_WHY}"] * bool(client))


def _refuse_hosted_only(tools: list, choice: Any, callable_: list[dict]) -> None:
    """400 when the answer would depend on a hosted tool (web search, file search, code interpreter, ...), as
    on the Anthropic API (anthropic_api.refuse_server_tools): `tool_choice` demands one, or every tool is one
    (a request made for it; answered without it, the model would invent its results). Beside function
    tools a hosted one is left out and the model answers with those. So are the client-run types whose calls
    are not written here (CLIENT_RUN_TYPES), and the 400 says so of them."""
    hosted = sorted({str(t.get("type")) for t in tools if isinstance(t, dict)
                     and t.get("type") not in ("function", "custom")})
    kind = choice.get("type") if isinstance(choice, dict) else None
    if isinstance(choice, dict) and kind not in (None, "function", "custom", "allowed_tools"):
        why = CLIENT_RUN_WHY if kind in CLIENT_RUN_TYPES else HOSTED_WHY
        raise APIError(400, f"'tool_choice' demands a {kind} tool: {why}", param="tool_choice")
    if hosted and not callable_ and choice != "none":
        raise APIError(400, f"'tools' holds only tools Strata cannot run {_why_not_run(hosted)}", param="tools")


def _named_tool(choice: dict) -> str:
    """The tool a `{"type": "function" | "custom", "name": ...}` choice names; 400 naming the field when the
    name is missing or not a non-empty string."""
    name = choice.get("name")
    if name is None:
        raise APIError(400, f"'tool_choice.name' is required for a tool_choice of type {choice['type']!r}: the tool "
                            f"to call, {{\"type\": \"{choice['type']}\", \"name\": ...}}", param="tool_choice")
    if not isinstance(name, str) or not name:
        raise APIError(400, f"'tool_choice.name' must be a non-empty string, got {name!r}", param="tool_choice")
    return name


def _allowed_tools(tools: list[dict], choice: dict) -> list[dict] | None:
    """The offered tools that `{"type": "allowed_tools", "mode": ..., "tools": [...]}` allows (its hosted
    tools name nothing the model can run); 400 for a bad mode or a function or custom tool not in 'tools'."""
    if choice.get("mode") not in ("auto", "required"):
        raise APIError(400, f"'tool_choice.mode' must be 'auto' or 'required'; got {choice.get('mode')!r}",
                       param="tool_choice")
    listed = choice.get("tools")
    if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
        raise APIError(400, "'tool_choice.tools' must be an array of tools such as {\"type\": \"function\", "
                            "\"name\": ...}", param="tool_choice")
    allowed = only_named_tools(tools, [("'tool_choice.tools'", t.get("name")) for t in listed
                                       if t.get("type") in ("function", "custom")])
    if not allowed and choice["mode"] == "required":
        raise APIError(400, "'tool_choice' is 'allowed_tools' of mode 'required' but allows no tool the model can "
                            "call", param="tool_choice")
    return allowed or None


def demands_call(choice: Any) -> bool:
    """Whether `tool_choice` demands a call: 'required', a named tool, or allowed tools of mode 'required'."""
    if isinstance(choice, dict):
        return choice.get("type") in ("function", "custom") or (
            choice.get("type") == "allowed_tools" and choice.get("mode") == "required")
    return choice == "required"


def parse_logprobs(body: dict) -> int | None:
    """The alternatives a token to report (0-20) when `include` asks for `message.output_text.logprobs`
    or `top_logprobs` asks for alternatives; None when neither does. Other `include` values are accepted."""
    include = f.get_list(body, "include") or []
    for i, v in enumerate(include):
        if not isinstance(v, str):
            raise APIError(400, f"include[{i}] must be a string such as {LOGPROBS_INCLUDE!r}", param="include")
    top = f.get_int(body, "top_logprobs", None, 0, MAX_TOP_LOGPROBS)
    return top or 0 if LOGPROBS_INCLUDE in include or top else None


# ----- the handler -----

async def _read_request(request: web.Request) -> tuple[Any, dict]:
    """(server state, body) of a Responses request, with the fields this stateless server refuses."""
    state = ready_state(request)
    body = await f.read_json_object(request)
    refuse_stored(body)
    return state, body


def refuse_stored(body: dict) -> None:
    """400 for what this stateless server cannot answer: state stored under an id, background runs; and for a
    field only echoed back (responses_echo.py) of the wrong type, before any work (POST and WebSocket alike)."""
    f.get_str(body, "model")
    echoed_fields(body)
    if body.get("previous_response_id") is not None:
        raise APIError(400, "'previous_response_id' is not supported: this server keeps no responses; send the "
                            "whole conversation in 'input'", param="previous_response_id")
    # server-side state named by id: ignored, the answer would silently lose the history or instructions
    # (the Agents SDK's conversation_id sends only the new items)
    if body.get("conversation") is not None:
        raise APIError(400, "'conversation' is not supported: this server keeps no conversations; send the "
                            "whole conversation in 'input'", param="conversation")
    if body.get("prompt") is not None:
        raise APIError(400, "'prompt' (a stored prompt template) is not supported: this server keeps no prompts; "
                            "send 'instructions' and 'input'", param="prompt")
    if body.get("background"):
        raise APIError(400, "'background' is not supported", param="background")


async def responses(request: web.Request) -> web.StreamResponse:
    state, body = await _read_request(request)
    return await answer(request, state, body)


async def answer(request: web.Request, state: Any, body: dict, sink: Events | None = None) -> web.StreamResponse:
    """One response to a checked body (refuse_stored): JSON, or its events on an SSE stream when it asks
    for `stream`, or on `sink` when one is given (responses_socket.py: the WebSocket transport)."""
    refuse_moderation(body)
    messages = parse_input(body)
    say_unpaired(state.said, messages, request.path)
    tools, custom = parse_tools(body)
    wanted = await off_loop(_text_format, body)
    if wants_compaction(body):
        return await _compaction_turn(request, state, body, messages, tools, custom, sink)
    tokens = await _prompt(state, body, messages, tools, fits=fits_check(state.engine, param="input"))
    check_prompt_fits(state.engine, len(tokens), param="input")
    job = Job(api="responses", prompt=tokens,
              max_tokens=f.get_max_tokens(body, ("max_output_tokens",), state.config.max_tokens_default),
              sampling=parse_sampling(body), stop=(), conversation=_conversation(body, messages),
              logprobs=parse_logprobs(body))
    fmt = one_call_format(answer_format(state.engine, tokens, messages), body.get("parallel_tool_calls"),
                          "parallel_tool_calls")
    shape = _Shape(body, body.get("model") or state.model_name, tools, custom, fmt, state.engine.tokenizer)
    job.answer_rule = await off_loop(answer_rule, wanted, tools, demands_call(body.get("tool_choice")), shape.fmt,
                                     state.engine, shown=_shown(state, body, messages, tools))
    job.call_end = first_call_end(fmt, tools)
    if sink is not None or f.get_bool(body, "stream"):
        return await _stream(request, state, job, shape, sink)
    completion, _ = await JobEvents(request, state.scheduler, job, stream=False).until_done()
    raise_if_failed(completion)
    return web.json_response(shape.response(completion, shape.output(completion, state.engine.tokenizer)))


def _text_format(body: dict) -> JsonFormat | None:
    """The JSON format `text.format` asks for (None: text), or the 400 for a malformed one (`text` itself is an
    object or null: refuse_stored checked it, responses_echo.py)."""
    return json_format((body.get("text") or {}).get("format"), "text.format", flat=True)


async def _prompt(state: Any, body: dict, messages: list[dict], tools: list[dict] | None,
                  fits: Callable[[int], None] | None = None) -> list[int]:
    """The prompt's tokens for a checked body's messages and tools: the template's rendering, with the reasoning
    effort (`fits`: prompting.tokenized's)."""
    effort = body.get("reasoning") or {}      # an object or null (refuse_stored)
    return await render_chat_async(state.engine, messages, _shown(state, body, messages, tools),
                                   template_vars=reasoning_effort(effort.get("effort"), "reasoning.effort"),
                                   fits=fits)


def _shown(state: Any, body: dict, messages: list[dict], tools: list[dict] | None) -> list[dict] | None:
    """The tools the prompt writes: a named tool (or allowed tools, a call demanded) writes every tool all the
    same when the call is held to it by name, and `none` writes them as `auto` does, the answer kept off
    calls: the prompt's start stays the conversation's (every tool: the choice left out)."""
    if body.get("tool_choice") == "none":
        return function_tools(body)[0] or None
    every = parse_tools({**body, "tool_choice": None})[0] if tools else None
    return shown_tools(every, tools, demands_call(body.get("tool_choice")),
                       answer_format(state.engine, [], messages), state.engine)


async def input_tokens(request: web.Request) -> web.Response:
    """`POST /v1/responses/input_tokens` (the openai SDK's `responses.input_tokens.count`): how many tokens the
    prompt of a response to this body holds, nothing generated; a prompt longer than the context is counted
    too, as Anthropic's count_tokens counts it (the count is how a client finds out)."""
    state, body = await _read_request(request)
    # what /v1/responses refuses of the same body before reading its prompt is refused here too: a count of a
    # request that would then be a 400 is no count of anything it reads
    refuse_moderation(body)
    messages = parse_input(body)
    tools, _ = parse_tools(body)
    await off_loop(_text_format, body)
    # an input ending in compaction_trigger is answered from the summary prompt, not the conversation's own
    tokens = await (compaction.summary_prompt(state.engine, messages, tools) if wants_compaction(body)
                    else _prompt(state, body, messages, tools))
    return web.json_response({"object": "response.input_tokens", "input_tokens": len(tokens)})


async def compact(request: web.Request) -> web.Response:
    """`POST /v1/responses/compact`: the request's user messages, then one compaction item holding the
    model's summary of the whole input (OpenAI's compacted response)."""
    state, body = await _read_request(request)
    messages = parse_input(body)
    tools, _ = parse_tools(body)
    summary, c, fmt = await compaction.summarize(request, state, messages, tools, _conversation(body, messages),
                                                 f.get_max_tokens(body, ("max_output_tokens",), None))
    shape = _Shape(body, body.get("model") or state.model_name, False, set(), fmt, state.engine.tokenizer)
    return web.json_response({"id": shape.id, "object": "response.compaction", "created_at": shape.created,
                              "output": compaction.user_items(messages) + [compaction.compaction_item(summary)],
                              "usage": shape.response(c, [])["usage"], "timings": c.timings})


async def _compaction_turn(request: web.Request, state: Any, body: dict, messages: list[dict],
                           tools: list[dict] | None, custom: set[str], sink: Events | None) -> web.StreamResponse:
    """A `/v1/responses` input ending in `compaction_trigger`: a response whose output is one compaction
    item (Codex's remote compaction), streamed or not."""
    summary, c, fmt = await compaction.summarize(request, state, messages, tools, _conversation(body, messages),
                                                 f.get_max_tokens(body, ("max_output_tokens",), None))
    shape = _Shape(body, body.get("model") or state.model_name, tools, custom, fmt, state.engine.tokenizer)
    item = compaction.compaction_item(summary)
    done = shape.response(c, [item], "completed")
    if sink is None and not f.get_bool(body, "stream"):
        return web.json_response(done)
    out = sink or await Events.sse(request)
    await out.send("response.created", response=shape.response(None, []))
    await out.send("response.in_progress", response=shape.response(None, []))
    await out.send("response.output_item.added", output_index=0, item=item)
    await out.send("response.output_item.done", output_index=0, item=item)
    await out.send("response.completed", response=done)
    return out.resp


# ----- shaping -----

class _Shape:
    """One response's ids and the request fields its objects echo."""

    def __init__(self, body: dict, model: str, tools: list[dict] | None, custom: set[str],
                 fmt: AnswerFormat = PLAIN, tokenizer: Any = None) -> None:
        self.id = f"resp_{uuid.uuid4().hex}"
        self.msg_id = f"msg_{uuid.uuid4().hex}"
        self.rs_id = f"rs_{uuid.uuid4().hex}"
        self.fmt = fmt                 # how the model writes reasoning and calls (prompting.AnswerFormat)
        self.tokenizer = tokenizer     # counts the tokens spent reasoning (None: none counted)
        self.created = int(time.time())
        self.echo = echoed_fields(body)
        self.model = model
        self.tools = tools
        self.custom = custom

    def response(self, c: Completion | None, output: list[dict], status: str | None = None) -> dict:
        """The response object: in progress (c None), or finished with its status, usage and timings."""
        if status is None:
            status = "in_progress" if c is None else "incomplete" if c.finish_reason == "length" else "completed"
        out: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created, "status": status, "model": self.model,
            "output": output, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            **self.echo, "usage": None,
        }
        if c is not None:
            # cache_write_tokens: the prompt tokens read now, which the slot keeps for the next turn
            out["usage"] = {"input_tokens": c.prompt_tokens,
                            "input_tokens_details": {"cached_tokens": c.cached_tokens,
                                                     "cache_write_tokens": c.prompt_tokens - c.cached_tokens},
                            "output_tokens": len(c.tokens), "output_tokens_details": {
                                "reasoning_tokens": reasoning_tokens(c.tokens, self.fmt, self.tokenizer)},
                            "total_tokens": c.prompt_tokens + len(c.tokens)}
            out["timings"] = c.timings
        return out

    def reasoning(self, text: str, status: str = "completed") -> dict:
        """A thinking model's reasoning as a reasoning item with its text (no summary)."""
        content = [{"type": "reasoning_text", "text": text}] if status == "completed" else []
        return {"type": "reasoning", "id": self.rs_id, "status": status, "summary": [], "content": content}

    def message(self, text: str, status: str = "completed", logprobs: list[dict] | None = None) -> dict:
        """The answer's text; `incomplete` when the token limit cut it (its text kept, as OpenAI's); with
        the `logprobs` of its tokens when they were asked for."""
        content = [] if status == "in_progress" else [output_text(text, logprobs)]
        return {"type": "message", "id": self.msg_id, "status": status, "role": "assistant", "content": content}

    def call_item(self, call: dict, status: str = "completed", args: str | None = None) -> dict:
        """A parsed tool call as a function_call item, or a custom_tool_call for a custom tool."""
        cid = call.setdefault("call_id", call_id("call_", call))
        tail = cid.removeprefix("call_")
        if call["name"] in self.custom:
            text = _custom_input(call["arguments"]) if args is None else args
            return {"type": "custom_tool_call", "id": f"ctc_{tail}", "call_id": cid, "name": call["name"],
                    "input": text, "status": status}
        return {"type": "function_call", "id": f"fc_{tail}", "call_id": cid, "name": call["name"],
                "arguments": call["arguments"] if args is None else args, "status": status}

    def output(self, c: Completion, tokenizer: Any = None) -> list[dict]:
        """The output items of a whole answer; the message's `logprobs` (its own tokens') when the job
        reported them."""
        reasoning, content, calls = split_answer(c.text, self.fmt, self.tools, cut=c.finish_reason == "length")
        logprobs = self.text_logprobs(c, tokenizer) if c.logprobs is not None and tokenizer is not None else None
        items = [self.reasoning(reasoning)] if reasoning is not None else []
        items += [self.message(content, "completed" if calls else _call_status(c), logprobs)] \
            if content or not calls else []
        return items + [self.call_item(call, _call_status(c, i == len(calls) - 1)) for i, call in enumerate(calls)]


    def text_logprobs(self, c: Completion, tokenizer: Any) -> list[dict]:
        """The entries of the message's tokens, its text placed as _stream places it: each piece the reader
        gives as it reads, then the text after the calls where it ends the answer."""
        track = TokenText(tokenizer)
        track.add_tokens(c.logprobs or [])
        track.add_text(c.text)
        reader = AnswerStream(self.fmt, self.tools)
        pieces = reader.feed(c.text)
        last, rest, _ = reader.finish(c.text, cut=c.finish_reason == "length")
        out: list[dict] = []
        for kind, piece in pieces + last:
            if kind == "text":
                out += track.take(piece)
            else:
                track.skip(piece)
        return out + track.take_tail(rest)


def output_text(text: str, logprobs: list[dict] | None = None) -> dict:
    """An `output_text` content part; `logprobs` only when they were asked for."""
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return part


def _custom_input(arguments: str) -> str:
    """A custom tool's text from the function-style arguments the model wrote ({"input": ...})."""
    try:
        value = json.loads(arguments)
    except (TypeError, json.JSONDecodeError):
        return arguments
    if isinstance(value, dict) and isinstance(value.get("input"), str):
        return value["input"]
    return arguments


class Events:
    """Writes one response's events with their `sequence_number`: as server-sent events on `resp`
    (Events.sse), or through `write` (one JSON object an event: a WebSocket's frames)."""

    def __init__(self, resp: web.StreamResponse, write: Callable[[dict], Awaitable[None]] | None = None) -> None:
        self.resp = resp
        self.write = write
        self.n = 0
        self.sent_at = time.monotonic()      # when the client last got an event

    @classmethod
    async def sse(cls, request: web.Request) -> Events:
        return cls(await open_sse(request))

    async def send(self, kind: str, **fields: Any) -> None:
        event = {"type": kind, "sequence_number": self.n, **fields}
        await (self.write(event) if self.write is not None else send_sse(self.resp, event, kind))
        self.n += 1
        self.sent_at = time.monotonic()


# a stream quiet this long is told again that its response is in progress (see _stream)
KEEPALIVE_S = 10.0


async def _stream(request: web.Request, state: Any, job: Job, shape: _Shape,
                  sink: Events | None = None) -> web.StreamResponse:
    # a full queue raises 503 before any byte is sent
    events = JobEvents(request, state.scheduler, job, keepalive_s=KEEPALIVE_S)
    out: Events | None = None
    answer = AnswerStream(shape.fmt, shape.tools)
    items: list[dict] = []          # the output items done
    open_item: dict | None = None   # the item being streamed: {"type", "index", "text", "logprobs"}
    # with logprobs asked for: which tokens wrote each piece of output text
    track = TokenText(state.engine.tokenizer) if job.logprobs is not None else None

    async def begin(kind: str) -> dict:
        nonlocal open_item
        assert out is not None
        await finish_item()
        open_item = {"type": kind, "index": len(items), "text": "", "logprobs": []}
        if kind == "reasoning":
            await out.send("response.output_item.added", output_index=open_item["index"],
                           item=shape.reasoning("", "in_progress"))
        else:
            await out.send("response.output_item.added", output_index=open_item["index"],
                           item=shape.message("", "in_progress"))
            await out.send("response.content_part.added", item_id=shape.msg_id, output_index=open_item["index"],
                           content_index=0, part=output_text(""))
        return open_item

    async def delta(kind: str, text: str, tail: bool = False) -> None:
        item = open_item if open_item is not None and open_item["type"] == kind else await begin(kind)
        item["text"] += text
        if kind == "reasoning":
            if track is not None:
                track.skip(text)
            await out.send("response.reasoning_text.delta", item_id=shape.rs_id, output_index=item["index"],
                           content_index=0, delta=text)
            return
        logprobs = [] if track is None else track.take_tail(text) if tail else track.take(text)
        item["logprobs"] += logprobs
        await out.send("response.output_text.delta", item_id=shape.msg_id, output_index=item["index"],
                       content_index=0, delta=text, logprobs=logprobs)

    async def finish_item(status: str = "completed") -> None:
        nonlocal open_item
        item, open_item = open_item, None
        if item is None or out is None:
            return
        at, text = item["index"], item["text"]
        logprobs = item["logprobs"] if track is not None else None
        if item["type"] == "reasoning":
            await out.send("response.reasoning_text.done", item_id=shape.rs_id, output_index=at, content_index=0,
                           text=text)
            items.append(shape.reasoning(text))
        else:
            await out.send("response.output_text.done", item_id=shape.msg_id, output_index=at, content_index=0,
                           text=text, logprobs=logprobs or [])
            await out.send("response.content_part.done", item_id=shape.msg_id, output_index=at, content_index=0,
                           part=output_text(text, logprobs))
            items.append(shape.message(text, status, logprobs))
        await out.send("response.output_item.done", output_index=at, item=items[-1])

    async def send(pieces: list[tuple[str, str]]) -> None:
        for kind, piece in pieces:
            await delta(kind, piece)

    try:
        async for kind, payload in events:
            if out is None:
                if kind == "done":      # ended unstarted (queued at a stop): a 503 the SDK retries, not a 200 stream
                    raise_if_failed(payload)
                out = sink or await Events.sse(request)
                await out.send("response.created", response=shape.response(None, []))
                await out.send("response.in_progress", response=shape.response(None, []))
            elif kind != "done" and time.monotonic() - out.sent_at >= KEEPALIVE_S:
                # quiet that long (waiting for a context, a long prompt being read, a tool call held back
                # until it is whole while its tokens come): a real event, since Codex's stream idle timer
                # counts events, not SSE comments
                await out.send("response.in_progress", response=shape.response(None, items))
            if kind == "logprobs" and track is not None:
                track.add_tokens(payload)
            elif kind == "text":
                if track is not None:
                    track.add_text(payload)
                await send(answer.feed(payload))
            elif kind == "done":
                c: Completion = payload
                if track is not None and c.text.startswith(track.text):
                    track.add_text(c.text[len(track.text):])
                if failed(c):
                    broken = shape.response(c, items, "failed")
                    broken["error"] = {"code": "server_error", "message": c.error or "generation failed"}
                    await out.send("response.failed", response=broken)
                    break
                pieces, rest, calls = answer.finish(c.text, cut=c.finish_reason == "length")
                await send(pieces)
                message_sent = any(i["type"] == "message" for i in items) or (
                    open_item is not None and open_item["type"] == "text")
                if rest or not (calls or message_sent):
                    if open_item is None or open_item["type"] != "text":
                        await begin("text")
                    if rest:
                        await delta("text", rest, tail=True)     # the text after the calls
                await finish_item("completed" if calls else _call_status(c))   # a cut message: incomplete
                for i, call in enumerate(calls):
                    status = _call_status(c, i == len(calls) - 1)
                    await _send_call(out, shape, call, len(items), status)
                    items.append(shape.call_item(call, status))
                final = shape.response(c, items)
                await out.send(f"response.{final['status']}", response=final)
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        events.close()
    return out.resp if out is not None else web.Response(status=499)


def _call_status(c: Completion, last: bool = True) -> str:
    """A call read from an answer the token limit cut is "incomplete" (a cut call's arguments as far as written;
    Qwen3-Coder's XML reads without its closing tags: the values written so far), as the response is; only the
    answer's last call can be the cut one: the calls before it were written whole ("completed": an agent runs
    them)."""
    return "incomplete" if c.finish_reason == "length" and last else "completed"


async def _send_call(out: Events, shape: _Shape, call: dict, index: int, status: str = "completed") -> None:
    """One tool call's events: the item added (empty), its arguments (or custom input) whole, done."""
    done = shape.call_item(call, status)
    await out.send("response.output_item.added", output_index=index,
                   item=shape.call_item(call, "in_progress", args=""))
    if done["type"] == "custom_tool_call":
        await out.send("response.custom_tool_call_input.delta", item_id=done["id"], output_index=index,
                       delta=done["input"])
        await out.send("response.custom_tool_call_input.done", item_id=done["id"], output_index=index,
                       input=done["input"])
    else:
        await out.send("response.function_call_arguments.delta", item_id=done["id"], output_index=index,
                       delta=done["arguments"])
        await out.send("response.function_call_arguments.done", item_id=done["id"], output_index=index,
                       name=done["name"], arguments=done["arguments"])
    await out.send("response.output_item.done", output_index=index, item=done)
