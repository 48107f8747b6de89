"""OpenAI-compatible endpoints: `POST /v1/chat/completions`, `GET /v1/models` (`POST /v1/completions`:
openai_completions.py, which uses what is shared here: sampling, usage, logprob texts, stream errors).

Thin handlers: validate the body into a `Job`, run it through the scheduler, shape the answer (JSON
or server-sent events) with `usage` (incl. `prompt_tokens_details.cached_tokens`) and llama.cpp's
`timings`. Not here: scheduling, chat templates, error rendering (errors.py via the middleware).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any

from aiohttp import web
from strata.engine.sampling import SamplingParams
from strata.server import fields as f
from strata.server.errors import APIError, error_body
from strata.server.jobrun import (
    JobEvents,
    failure,
    open_sse,
    raise_if_failed,
    send_keepalive,
    send_sse,
)
from strata.server.jobs import Completion, Job
from strata.server.keys import STATE, ServerState
from strata.server.off_loop import off_loop
from strata.server.one_call import first_call_end, one_call_format
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
    only_named_tools,
    reasoning_effort,
    reasoning_tokens,
    render_chat_async,
    split_answer,
    template_kwargs,
)
from strata.server.structured_output import answer_rule, json_format, shown_tools
from strata.server.tool_pairing import say_unpaired

from strata import __version__

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_TOP_LOGPROBS = 20        # OpenAI's limit for chat; completions' `logprobs` takes up to 5 there


def ready_state(request: web.Request) -> ServerState:
    state = request.app[STATE]
    if not state.ready:
        raise APIError(503, state.load_error or "the model is still loading; retry in a moment",
                       headers={"Retry-After": "2"})
    return state


# ----- request parsing -----

CHAT_MEDIA = ("image_url", "input_image", "input_audio", "file")


def _content_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return f.text_of_parts(content, where, text_types=("text", "input_text"),
                               media_types=CHAT_MEDIA, noun="parts")
    raise f.wrong_type(where, CONTENT, content)


CONTENT = "a string or an array of content parts"


MEDIA_IN_TOOL_OUTPUT = "[{kind} omitted: this model reads text only]"


def tool_output_text(content: Any, where: str, text_types: tuple[str, ...], media_types: tuple[str, ...]) -> str:
    """A tool's output as text. An image or file part there (a tool that returned a screenshot: the Agents
    SDK's ToolOutputImage) becomes a note instead of a 400: the agent did not choose it and resends it
    every turn, so its session could not go on. (An image the user sends is still refused.)"""
    if isinstance(content, list):
        content = [{"type": "text", "text": MEDIA_IN_TOOL_OUTPUT.format(kind=p["type"])}
                   if isinstance(p, dict) and p.get("type") in media_types else p for p in content]
        return f.text_of_parts(content, where, text_types=(*text_types, "text"), media_types=media_types,
                               noun="parts")
    return _content_text(content, where)


def conversation_of(body: dict, messages: list[dict]) -> str:
    """The conversation's key: from `prompt_cache_key` when the client names it (Codex: its session id; the
    Agents SDK's extra_args), so that two sessions that start alike stay apart, else from the first
    messages. Chat completions and the Responses API name a conversation alike."""
    named = f.get_str(body, "prompt_cache_key")
    if named:
        return hashlib.sha256(b"prompt_cache_key\x00" + named.encode()).hexdigest()[:12]
    return conversation_key(messages)


def parse_messages(raw: list) -> list[dict]:
    """Chat messages checked and normalised. A field of the wrong type is a 400 naming its place
    (fields.field); null reads as left out, so a null `content` is a 400 where the role needs content
    (every role but the assistant's). Ids are not checked against each other here (tool_pairing.py)."""
    out: list[dict] = []
    for where, m in f.objects(raw, "messages"):
        role = m.get("role")
        if role not in ROLES:
            raise APIError(400, f"{where}.role must be one of {', '.join(ROLES)}; got {role!r}", param=where)
        cw = f"{where}.content"
        if role != "assistant" and m.get("content") is None:
            raise APIError(400, f"{cw} is required", param=cw)
        content = refusals_as_text(m) if role == "assistant" else m["content"]
        text = tool_output_text(content, cw, ("input_text",), CHAT_MEDIA) if role == "tool" \
            else _content_text(content, cw)
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": text}
        if role == "assistant":
            calls = f.field(m, where, "tool_calls", list, "an array of tool calls")
            if calls is not None:
                msg["tool_calls"] = [_tool_call(c, w) for w, c in f.objects(calls, f"{where}.tool_calls")]
            reasoning = f.field(m, where, "reasoning_content", str, "a string")
            if reasoning is not None:
                msg["reasoning_content"] = reasoning     # thinking models' templates write it back
        if role == "tool":
            msg["tool_call_id"] = f.field(m, where, "tool_call_id", str, "a string") or ""
            name = f.field(m, where, "name", str, "a string")
            if name is not None:
                msg["name"] = name
        out.append(msg)
    return out


def _tool_call(c: dict, where: str) -> dict:
    """An assistant's earlier tool call: `function.name` required; `id` and `function.arguments` may be left
    out (an empty id, no arguments). Arguments are JSON text the template reads (not parsed here: one that
    is not a JSON object is named by render_chat when the template cannot write it)."""
    fw = f"{where}.function"
    fn = f.expect_object(c.get("function"), fw)
    name = f.field(fn, fw, "name", str, "a string", required=True)
    args = f.field(fn, fw, "arguments", str, "a string (JSON text)")
    return {"id": f.field(c, where, "id", str, "a string") or "", "type": "function",
            "function": {"name": name, "arguments": "{}" if args is None else args}}


def refusals_as_text(m: dict) -> Any:
    """An assistant message's content with its `refusal` parts as text parts, or its `refusal` string as the
    text when it has no content (a history an OpenAI model wrote: what it said is what the next turn reads;
    a refusal part was a 400)."""
    content = m.get("content")
    if isinstance(content, list):
        return [{"type": "text", "text": p["refusal"]} if isinstance(p, dict) and p.get("type") == "refusal"
                and isinstance(p.get("refusal"), str) else p for p in content]
    if not content and isinstance(m.get("refusal"), str):
        return m["refusal"]
    return content


def parse_tools(body: dict) -> list[dict] | None:
    tools = f.get_list(body, "tools")
    if not tools:
        if isinstance(body.get("tool_choice"), dict):   # naming a function that is not offered
            raise APIError(400, "'tool_choice' names a function but 'tools' is empty or missing",
                           param="tool_choice")
        if body.get("tool_choice") == "required":       # a call demanded with nothing to call (OpenAI: 400)
            raise APIError(400, "'tool_choice' is 'required' but 'tools' is empty or missing", param="tool_choice")
        if body.get("tool_choice") not in (None, "none", "auto"):   # junk is junk with or without tools
            raise APIError(400, "'tool_choice' must be 'none', 'auto', 'required' or an object", param="tool_choice")
        return None
    out = []
    for tw, t in f.objects(tools, "tools"):
        if t.get("type", "function") != "function":
            hint = ": a custom tool's free-form input cannot be held to anything here; offer it as a function " \
                   "with a string parameter" if t.get("type") == "custom" else ""
            raise APIError(400, f"{tw}.type must be 'function', got {t.get('type')!r}{hint}", param="tools")
        fn = f.expect_object(t.get("function"), f"{tw}.function")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise APIError(400, f"{tw}.function.name must be a non-empty string", param="tools")
        fn = {**fn, "parameters": f.tool_schema(fn.get("parameters"), f"{tw}.function.parameters")}
        out.append({"type": "function", "function": fn})
    choice = body.get("tool_choice")
    if choice == "none":
        return None
    if choice is not None and choice not in ("auto", "required") and not isinstance(choice, dict):
        raise APIError(400, "'tool_choice' must be 'none', 'auto', 'required' or an object", param="tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        return allowed_tools(out, choice.get("allowed_tools"))
    if isinstance(choice, dict):          # a named function: only that one is offered
        name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
        if not isinstance(name, str) or not name:
            raise APIError(400, "'tool_choice' as an object must name a function: "
                                "{\"type\": \"function\", \"function\": {\"name\": ...}}", param="tool_choice")
        return only_named_tool(out, name)
    return out


def allowed_tools(tools: list[dict], allowed: Any) -> list[dict]:
    """The tools `tool_choice: {"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}` (openai's
    ChatCompletionAllowedToolChoiceParam) allows; 400 for a bad mode or a tool not in 'tools'."""
    if not isinstance(allowed, dict) or allowed.get("mode") not in ("auto", "required"):
        raise APIError(400, "'tool_choice.allowed_tools' must be an object whose 'mode' is 'auto' or 'required'",
                       param="tool_choice")
    listed = allowed.get("tools")
    if not isinstance(listed, list) or not listed:
        raise APIError(400, "'tool_choice.allowed_tools.tools' must be a non-empty array of tools such as "
                            "{\"type\": \"function\", \"function\": {\"name\": ...}}", param="tool_choice")
    return only_named_tools(tools, [(w, t["function"].get("name") if isinstance(t.get("function"), dict) else None)
                                    for w, t in f.objects(listed, "tool_choice.allowed_tools.tools")])


def demands_call(choice: Any) -> bool:
    """Whether chat's `tool_choice` demands a call: 'required', a named function, or allowed tools of mode
    'required'."""
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        return isinstance(choice.get("allowed_tools"), dict) and choice["allowed_tools"].get("mode") == "required"
    return choice == "required" or isinstance(choice, dict)


def parse_logit_bias(body: dict, n_vocab: int) -> tuple[tuple[int, float], ...]:
    """OpenAI's `logit_bias`: {"token id": bias in [-100, 100]} as (id, bias) pairs."""
    raw = body.get("logit_bias")
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise APIError(400, "'logit_bias' must be an object of token ids to biases", param="logit_bias")
    out = []
    for key, bias in raw.items():
        if not (isinstance(key, str) and key.strip().isdigit() and int(key) < n_vocab):
            raise APIError(400, f"'logit_bias' key {key!r} is not a token id (0..{n_vocab - 1})", param="logit_bias")
        if isinstance(bias, bool) or not isinstance(bias, int | float) or not -100 <= bias <= 100:
            raise APIError(400, f"'logit_bias' of token {key} must be a number between -100 and 100, got {bias!r}",
                           param="logit_bias")
        out.append((int(key), float(bias)))
    return tuple(out)


SMALLEST_TOP_P = 1e-9   # the nucleus of the one likeliest token: what top_p 0 asks for


def _top_p(body: dict, name: str) -> float:
    """`top_p` in [0, 1] as OpenAI's API reference bounds it (and Anthropic's); 0 keeps the likeliest token alone
    (llama.cpp keeps one token at least too), which the sampler, taking a nucleus above 0, is asked as the
    smallest one."""
    top_p = f.get_number(body, name, 1.0, 0.0, 1.0)
    return SMALLEST_TOP_P if top_p == 0 else top_p


def _seed(body: dict) -> int | None:
    """`seed`: any 64-bit signed integer, as OpenAI's API takes it (the SDKs' type; -1 is a seed like any other
    there, not llama.cpp's "random"); a negative one seeds the generator as its two's complement, so each seed
    is its own stream."""
    seed = f.get_int(body, "seed", None, -(1 << 63), (1 << 63) - 1)
    return None if seed is None else seed % (1 << 64)


def parse_sampling(body: dict, top_p_name: str = "top_p", n_vocab: int | None = None) -> SamplingParams:
    """The sampling fields; `logit_bias` too when the vocabulary size is given (the OpenAI endpoints)."""
    try:
        return SamplingParams(
            temperature=f.get_number(body, "temperature", 1.0, 0.0, 2.0),
            top_p=_top_p(body, top_p_name),
            top_k=f.get_int(body, "top_k", 0, 0, 1 << 20),
            min_p=f.get_number(body, "min_p", 0.0, 0.0, 1.0),
            presence_penalty=f.get_number(body, "presence_penalty", 0.0, -2.0, 2.0),
            frequency_penalty=f.get_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
            repeat_penalty=f.get_number(body, "repeat_penalty", 1.0, 1e-6, 10.0),
            seed=_seed(body),
            logit_bias=parse_logit_bias(body, n_vocab) if n_vocab is not None else (),
        )
    except ValueError as e:
        raise APIError(400, str(e)) from None


def common_checks(body: dict) -> None:
    n = f.get_int(body, "n", 1, 1, 1 << 20)
    if n != 1:
        raise APIError(400, f"'n' must be 1 (got {n}); send separate requests for several answers", param="n")
    if body.get("best_of") not in (None, 1):
        raise APIError(400, "'best_of' must be 1; send separate requests for several answers", param="best_of")
    f.get_str(body, "model")
    f.get_bool(body, "stream")


# ----- handlers -----

async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = ready_state(request)
    body = await f.read_json_object(request)
    common_checks(body)
    if body.get("messages") is None and "prompt" in body:
        raise APIError(400, "'messages' is required: a plain 'prompt' goes to POST /v1/completions", param="messages")
    if body.get("echo"):       # the legacy completions' field (completion_echo.py); chat has none
        raise APIError(400, "'echo' is not supported on chat completions: POST /v1/completions echoes its prompt",
                       param="echo")
    messages = parse_messages(f.get_list(body, "messages", required=True, nonempty=True))
    say_unpaired(state.said, messages, request.path)
    refuse_unserved(body)
    tools = parse_tools(body)
    wanted = await off_loop(json_format, body.get("response_format"))
    shown, variables = prompt_tools_and_variables(state.engine, body, messages, tools)
    tokens = await render_chat_async(state.engine, messages, shown, template_vars=variables,
                                     fits=fits_check(state.engine))
    check_prompt_fits(state.engine, len(tokens))
    job = Job(api="openai", prompt=tokens,
              max_tokens=f.get_max_tokens(body, ("max_completion_tokens", "max_tokens"),
                                          state.config.max_tokens_default),
              sampling=parse_sampling(body, n_vocab=state.engine.n_vocab), stop=f.get_stop(body, "stop"),
              conversation=conversation_of(body, messages), ignore_eos=f.get_bool(body, "ignore_eos"))
    model = body.get("model") or state.model_name
    fmt = one_call_format(answer_format(state.engine, tokens, messages), body.get("parallel_tool_calls"),
                          "parallel_tool_calls")
    job.answer_rule = await off_loop(answer_rule, wanted, tools, demands_call(body.get("tool_choice")), fmt, state.engine,
                                     shown=shown)
    job.call_end = first_call_end(fmt, tools)
    job.logprobs = _chat_logprobs(body)
    include_usage = usage_asked(body)
    if body.get("stream"):
        return await _stream_chat(request, state, job, model, tools, include_usage, fmt)
    completion, _ = await JobEvents(request, state.scheduler, job, stream=False).until_done()
    raise_if_failed(completion)
    return web.json_response(chat_response(completion, model, tools, fmt, state.engine.tokenizer))


def usage_asked(body: dict) -> bool:
    """`stream_options.include_usage` (chat and completions): a stream then ends with a chunk of `usage` whose
    `choices` is empty, before `[DONE]`. Given without `stream` it is OpenAI's 400 (a null is no option: the SDK
    may send one)."""
    opts = body.get("stream_options")
    if opts is not None and not body.get("stream"):
        raise APIError(400, "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                       param="stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise APIError(400, "'stream_options' must be an object like {\"include_usage\": true}", param="stream_options")
    include_usage = (opts or {}).get("include_usage", False)
    if include_usage is not None and not isinstance(include_usage, bool):
        raise APIError(400, "'stream_options.include_usage' must be a boolean", param="stream_options")
    return bool(include_usage)


def prompt_tools_and_variables(engine: Any, body: dict, messages: list[dict],
                               tools: list[dict] | None) -> tuple[list[dict] | None, dict[str, Any]]:
    """The tools a chat request's prompt shows and its template variables: with its messages, what render_chat
    renders (a session saved by its messages renders them so too: server/history_save.py)."""
    variables = {**template_kwargs(body.get("chat_template_kwargs")),
                 **reasoning_effort(body.get("reasoning_effort"), "reasoning_effort")}
    # a named function (or allowed tools, a call demanded) writes every tool all the same when the call is
    # held to it by name, and `none` writes them as `auto` does, the answer kept off calls: the prompt's start
    # stays the conversation's (every tool: the choice left out)
    every = parse_tools({**body, "tool_choice": None})
    if body.get("tool_choice") == "none":
        return every, variables
    shown = shown_tools(every if tools else None, tools, demands_call(body.get("tool_choice")),
                        answer_format(engine, [], messages), engine)
    return shown, variables


def refuse_unserved(body: dict) -> None:
    """400 for chat fields OpenAI honours that would change the answer here if they were ignored: the
    deprecated `functions` / `function_call` (the tools would be dropped; `function_call` "auto" or "none"
    alone changes nothing), an audio answer (`modalities` with "audio", `audio`), `moderation` and
    `web_search_options`."""
    if f.get_list(body, "functions"):
        raise APIError(400, "'functions' (deprecated) is not supported: send them as 'tools' "
                            "([{\"type\": \"function\", \"function\": ...}])", param="functions")
    if body.get("function_call") not in (None, "auto", "none"):
        raise APIError(400, "'function_call' (deprecated) is not supported: send 'tool_choice' "
                            "({\"type\": \"function\", \"function\": {\"name\": ...}})", param="function_call")
    modalities = body.get("modalities")
    if modalities is not None and (not isinstance(modalities, list) or not all(isinstance(m, str) for m in modalities)):
        raise APIError(400, "'modalities' must be an array of strings such as [\"text\"]", param="modalities")
    if "audio" in (modalities or ()):
        raise APIError(400, "an audio answer ('modalities' with \"audio\") is not supported: this model writes text "
                            "only; ask for [\"text\"]", param="modalities")
    if body.get("audio") is not None:
        raise APIError(400, "'audio' (an audio answer's voice and format) is not supported: this model writes text "
                            "only", param="audio")
    refuse_moderation(body)
    if body.get("web_search_options") is not None:   # OpenAI's search models search first; answered without it,
        # the model would invent what a search found
        raise APIError(400, "'web_search_options' is not supported: the model cannot search the web here; offer "
                            "a search as a function tool the client runs", param="web_search_options")


def refuse_moderation(body: dict) -> None:
    """400 for `moderation` (openai 3.60, chat and Responses: the answer scored, or blocked): no moderation
    model runs here, and an answer that was to be blocked must not come back unchecked."""
    if body.get("moderation") is not None:
        raise APIError(400, "'moderation' is not supported: no moderation model runs here, so nothing would be "
                            "scored or blocked; moderate the input and the answer in the client", param="moderation")


def _chat_logprobs(body: dict) -> int | None:
    """Chat's `logprobs` (a boolean) and `top_logprobs` (alternatives a token, 0-20): None when not asked."""
    top = f.get_int(body, "top_logprobs", None, 0, MAX_TOP_LOGPROBS)
    if not f.get_bool(body, "logprobs"):
        if top is not None:
            raise APIError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        return None
    return top or 0


def token_text(raw: bytes) -> str:
    """A token's text; one that is not whole UTF-8 (part of a character) as OpenAI writes it, "bytes:\\xNN..."."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def _token_fields(tokenizer: Any, token: int, logprob: float) -> dict:
    raw = tokenizer.token_bytes(token)
    return {"token": token_text(raw), "logprob": logprob, "bytes": list(raw)}


def logprob_entry(tokenizer: Any, entry: tuple) -> dict:
    """One sampling.token_logprobs entry as OpenAI writes it (chat's `content`, Responses' `output_text`):
    `{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}`."""
    token, logprob, alternatives = entry
    return {**_token_fields(tokenizer, token, logprob),
            "top_logprobs": [_token_fields(tokenizer, a, alp) for a, alp in alternatives]}


def chat_logprobs(tokenizer: Any, entries: list) -> dict:
    """Chat's `logprobs` object for sampling.token_logprobs entries: the model's log-probabilities (before
    temperature and penalties), each token's bytes, and the asked alternatives."""
    return {"content": [logprob_entry(tokenizer, e) for e in entries], "refusal": None}


def chat_response(completion: Completion, model: str, tools: list[dict] | None, fmt: AnswerFormat = PLAIN,
                  tokenizer: Any = None) -> dict:
    """The chat.completion object; a thinking model's reasoning becomes `reasoning_content` (server/
    reasoning.py, harmony.py); with tools offered, the model's tool calls become `tool_calls`."""
    reasoning, content, calls = split_answer(completion.text, fmt, tools, cut=completion.finish_reason == "length",
                                             stopped=completion.stop_sequence)
    message: dict[str, Any] = {"role": "assistant", "content": content if (content or not calls) else None}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    finish = finish_reason(completion)
    if calls:
        message["tool_calls"] = _tool_calls(calls)
        finish = _calls_finish_reason(completion)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
        "model": model, "system_fingerprint": f"strata-{__version__}",
        "choices": [{"index": 0, "message": message, "finish_reason": finish,
                     "logprobs": chat_logprobs(tokenizer, completion.logprobs)
                     if completion.logprobs is not None and tokenizer is not None else None}],
        "usage": usage(completion, fmt, tokenizer), "timings": completion.timings,
    }


def _model_object(name: str, state: ServerState) -> dict:
    """One model as both SDKs read it: OpenAI's `id`, `object`, `created`, `owned_by`; Anthropic's `type`,
    `display_name`, `created_at`, `lifecycle` (a field its SDK's type requires) and, once the model is loaded,
    `max_input_tokens` (the longest prompt a request may send: the largest context less the answer's one token,
    what the "prompt is too long" 400 names); `served_by` the loaded model that answers to the name."""
    created = int(state.started)
    out = {"id": name, "object": "model", "created": created, "owned_by": "strata",
           "type": "model", "display_name": name,
           "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created)), "lifecycle": "active",
           "served_by": state.model_name}
    if state.ready:
        out["max_input_tokens"] = state.engine.context_capacity(0) - 1
    return out


async def models(request: web.Request) -> web.Response:
    """`GET /v1/models`: the loaded model and its aliases, as an OpenAI list and as an Anthropic page (one
    page: `has_more` false, `first_id` / `last_id`), so `models.list()` of either SDK reads every field."""
    state = request.app[STATE]
    data = [_model_object(name, state) for name in state.model_names()]
    # none before the model is loaded (no alias): Anthropic's page says null ids then (was a 500, IndexError)
    return web.json_response({"object": "list", "data": data, "has_more": False,
                              "first_id": data[0]["id"] if data else None,
                              "last_id": data[-1]["id"] if data else None})


async def model(request: web.Request) -> web.Response:
    """`GET /v1/models/{model}` (the SDKs' `models.retrieve`): every name is served by the loaded model,
    so every name is found; `served_by` names the model that answers."""
    state = request.app[STATE]
    return web.json_response(_model_object(request.match_info["model"], state))


# ----- shaping -----

def usage(c: Completion, fmt: AnswerFormat | None = None, tokenizer: Any = None) -> dict:
    """Chat's and completions' usage; for chat (`fmt` given) with the tokens spent reasoning too."""
    out = {"prompt_tokens": c.prompt_tokens, "completion_tokens": len(c.tokens),
           "total_tokens": c.prompt_tokens + len(c.tokens),
           "prompt_tokens_details": {"cached_tokens": c.cached_tokens}}
    if fmt is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens(c.tokens, fmt, tokenizer)}
    return out


def finish_reason(c: Completion) -> str:
    return "length" if c.finish_reason == "length" else "stop"


def _calls_finish_reason(c: Completion) -> str:
    """An answer with tool calls: "tool_calls", unless max_tokens or the context cut it ("length", as OpenAI
    says): a call cut in the middle (its arguments as far as written, prompting.with_cut_call; Qwen3-Coder's
    XML parses without its closing tags) has lost arguments, and an agent must not run it as if it were whole."""
    return "length" if c.finish_reason == "length" else "tool_calls"


def _tool_calls(calls: list[dict]) -> list[dict]:
    return [{"id": call_id("call_", c), "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]


def _chunk(cid: str, model: str, delta: dict, finish: str | None, extra: dict | None = None,
           logprobs: dict | None = None) -> dict:
    out = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
           "system_fingerprint": f"strata-{__version__}",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]}
    if extra:
        out.update(extra)
    return out


def stream_error(err: APIError) -> dict:
    """The event that ends a chat or completions stream that began and then failed: OpenAI's error object,
    `{"error": {"message", "type", "param", "code"}}`, which the openai SDK's stream parser raises as an
    APIError with that message (the 503 a stop's cut is, "the server is stopping"; the 500 of a failure)."""
    return error_body("openai", err.status, err.message, err.param, err.code)


# a stream quiet this long (queued, a long prompt being read on a CPU, a long tool call held back until
# it is whole) gets an SSE comment, which clients skip: an HTTP client's read timeout (the openai SDK's
# 600 s, aider's through litellm) counts the bytes
KEEPALIVE_S = 10.0


async def _stream_chat(request: web.Request, state: ServerState, job: Job, model: str, tools: list[dict] | None,
                       include_usage: bool, fmt: AnswerFormat = PLAIN) -> web.StreamResponse:
    """SSE: a role chunk, `reasoning_content` chunks while a thinking model thinks, content chunks, a
    finish chunk (with `timings`), optionally a usage chunk, then [DONE]. With tools, text that may be a
    tool call is held (AnswerStream) and the calls are sent as `tool_calls` deltas at the end."""
    cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    # a full queue raises 503 before any byte is sent
    events = JobEvents(request, state.scheduler, job, keepalive_s=KEEPALIVE_S)
    resp: web.StreamResponse | None = None
    answer = AnswerStream(fmt, tools)
    last_out = time.monotonic()          # when the client last got a byte

    async def send(pieces: list[tuple[str, str]]) -> None:
        nonlocal last_out
        assert resp is not None
        if pieces:
            last_out = time.monotonic()
        for kind, piece in pieces:
            key = "reasoning_content" if kind == "reasoning" else "content"
            await send_sse(resp, _chunk(cid, model, {key: piece}, None))

    try:
        async for kind, payload in events:
            if resp is None:            # started, or still queued after KEEPALIVE_S
                if kind == "done":      # ended unstarted (queued at a stop): a status the SDK retries, not a 200
                    raise_if_failed(payload)
                resp = await open_sse(request)
                await send_sse(resp, _chunk(cid, model, {"role": "assistant", "content": ""}, None))
                last_out = time.monotonic()
            if kind != "done" and time.monotonic() - last_out >= KEEPALIVE_S:
                await send_keepalive(resp)          # the prompt is being read, or a call held back
                last_out = time.monotonic()
            if kind == "text":
                await send(answer.feed(payload))
            elif kind == "logprobs":
                await send_sse(resp, _chunk(cid, model, {}, None, logprobs=chat_logprobs(state.engine.tokenizer, payload)))
            elif kind == "done":
                c: Completion = payload
                err = failure(c)
                if err is not None:      # a stop's cut (503) or a failure (500), as the SDK's parser raises it
                    await send_sse(resp, stream_error(err))
                    break
                pieces, content, calls = answer.finish(c.text, cut=c.finish_reason == "length",
                                                       stopped=c.stop_sequence)
                await send(pieces)
                finish = finish_reason(c)
                if content:
                    await send_sse(resp, _chunk(cid, model, {"content": content}, None))
                if calls:
                    deltas = [dict(index=i, **tc) for i, tc in enumerate(_tool_calls(calls))]
                    await send_sse(resp, _chunk(cid, model, {"tool_calls": deltas}, None))
                    finish = _calls_finish_reason(c)
                await send_sse(resp, _chunk(cid, model, {}, finish, {"timings": c.timings}))
                if include_usage:
                    await send_sse(resp, {**_chunk(cid, model, {}, None), "choices": [],
                                          "usage": usage(c, fmt, state.engine.tokenizer)})
                await send_sse(resp, "[DONE]")
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        events.close()
    if resp is None:
        return web.Response(status=499)
    return resp
