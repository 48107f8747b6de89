"""OpenAI-compatible endpoints: `POST /v1/chat/completions`, `POST /v1/completions`, `GET /v1/models`.

Thin handlers: validate the body into a `Job`, run it through the scheduler, shape the answer (JSON
or server-sent events) with `usage` (incl. `prompt_tokens_details.cached_tokens`) and llama.cpp's
`timings`. Not here: scheduling, chat templates, error rendering (errors.py via the middleware).
"""

from __future__ import annotations

import codecs
import hashlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web
from strata.engine.sampling import SamplingParams
from strata.server import fields as f
from strata.server.completion_echo import completion_max_tokens, echo_asked, echoed_prompt, unseen_tokens
from strata.server.errors import APIError, error_body
from strata.server.fim_prompt import FimRequest, fim_context, fim_prompt, laid_out_for_fim, no_fim_error
from strata.server.jobrun import (
    JobEvents,
    client_gone,
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
from strata.server.prompt_list import several_prompts, summed_usage
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
    tokenized,
    tokens_key,
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


def _common_checks(body: dict) -> None:
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
    _common_checks(body)
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
    include_usage = _include_usage(body)
    if body.get("stream"):
        return await _stream_chat(request, state, job, model, tools, include_usage, fmt)
    completion, _ = await JobEvents(request, state.scheduler, job, stream=False).until_done()
    raise_if_failed(completion)
    return web.json_response(chat_response(completion, model, tools, fmt, state.engine.tokenizer))


def _include_usage(body: dict) -> bool:
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


def _token_text(raw: bytes) -> str:
    """A token's text; one that is not whole UTF-8 (part of a character) as OpenAI writes it, "bytes:\\xNN..."."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def _token_fields(tokenizer: Any, token: int, logprob: float) -> dict:
    raw = tokenizer.token_bytes(token)
    return {"token": _token_text(raw), "logprob": logprob, "bytes": list(raw)}


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


def _chars_before(before: bytes, nxt: bytes) -> int:
    """How many characters of the decoded text come before a token of bytes `nxt` that follows `before`
    (bad bytes are U+FFFD each, as the text is decoded; an unfinished character that `nxt` finishes counts
    from where it begins)."""
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    n = len(dec.decode(before, final=False))
    pending = dec.getstate()[0]
    if pending:
        try:
            codecs.getincrementaldecoder("utf-8")("strict").decode(pending + nxt[:1], final=False)
        except UnicodeDecodeError:                  # never finished: its U+FFFDs come first
            n += len(pending.decode("utf-8", errors="replace"))
    return n


def completion_logprobs(tokenizer: Any, entries: list, before: bytes = b"", unseen: int = 0) -> tuple[dict, bytes]:
    """The legacy completions `logprobs` object: tokens, their log-probabilities, the alternatives as
    {token: logprob} and each token's character offset in the text (`before`: the bytes of the tokens
    sent earlier; the first `unseen` entries' tokens are not in the text, completion_echo.unseen_tokens: they
    take no characters). Returns it and the bytes so far."""
    offsets, tokens = [], []
    for i, (t, _, _) in enumerate(entries):
        raw = tokenizer.token_bytes(t)
        offsets.append(_chars_before(before, raw))
        tokens.append(_token_text(raw))
        if i >= unseen:
            before += raw
    return ({"tokens": tokens, "token_logprobs": [lp for _, lp, _ in entries],
             "top_logprobs": [None if alts is None else {_token_text(tokenizer.token_bytes(a)): alp for a, alp in alts}
                              for _, _, alts in entries],
             "text_offset": offsets}, before)


def chat_response(completion: Completion, model: str, tools: list[dict] | None, fmt: AnswerFormat = PLAIN,
                  tokenizer: Any = None) -> dict:
    """The chat.completion object; a thinking model's reasoning becomes `reasoning_content` (server/
    reasoning.py, harmony.py); with tools offered, the model's tool calls become `tool_calls`."""
    reasoning, content, calls = split_answer(completion.text, fmt, tools, cut=completion.finish_reason == "length",
                                             stopped=completion.stop_sequence)
    message: dict[str, Any] = {"role": "assistant", "content": content if (content or not calls) else None}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    finish = _finish_reason(completion)
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


async def completions(request: web.Request) -> web.StreamResponse:
    return await complete(request, await f.read_json_object(request))


async def complete(request: web.Request, body: dict) -> web.StreamResponse:
    """/v1/completions on a body already read (completion_api.py hands /completions bodies that name a model)."""
    state = ready_state(request)
    _common_checks(body)
    if body.get("prompt") is None and "messages" in body:
        raise APIError(400, "'prompt' is required: chat 'messages' go to POST /v1/chat/completions", param="prompt")
    echo = echo_asked(body)
    max_tokens = completion_max_tokens(body, echo)
    many = several_prompts(body.get("prompt"))
    if many is not None:
        return await _complete_several(request, state, body, many, echo, max_tokens)
    fim = await off_loop(_fim_tokens, state, body, max_tokens)     # tokenizes: seconds for megabytes
    job, echoed, unseen = await _completion_job(state, body, body.get("prompt"), fim, echo, max_tokens)
    scored = job.prompt_logprobs is not None     # the prompt's tokens scored (completion_echo.py)
    whole = echo and max_tokens == 0             # the echo is the whole answer: streamed as one chunk
    model = body.get("model") or state.model_name
    cid = f"cmpl-{uuid.uuid4().hex[:24]}"
    include_usage = _include_usage(body)
    if body.get("stream"):
        resp: web.StreamResponse | None = None
        events = JobEvents(request, state.scheduler, job)
        sent = b""                      # the bytes of the tokens whose logprobs were sent (their text_offset)
        try:
            async for kind, payload in events:
                if resp is None:
                    if kind == "done":  # ended unstarted (queued at a stop): a status the SDK retries, not a 200
                        raise_if_failed(payload)
                    resp = await open_sse(request)
                    if echoed and not (scored or whole):   # OpenAI's echo: the prompt's text is the first chunk
                        await send_sse(resp, _cmpl_chunk(cid, model, echoed, None))
                if kind == "prompt_logprobs" and not whole:   # a scored echo: once its prompt is read
                    lps, sent = completion_logprobs(state.engine.tokenizer, payload, unseen=unseen)
                    await send_sse(resp, _cmpl_chunk(cid, model, echoed, None, logprobs=lps))
                elif kind == "text":
                    await send_sse(resp, _cmpl_chunk(cid, model, payload, None))
                elif kind == "logprobs":
                    lps, sent = completion_logprobs(state.engine.tokenizer, payload, sent)
                    await send_sse(resp, _cmpl_chunk(cid, model, "", None, logprobs=lps))
                elif kind == "done" and (err := failure(payload)) is not None:
                    await send_sse(resp, stream_error(err))
                elif kind == "done":
                    # asked for OpenAI's usage chunk, the last chunk is as OpenAI's (no usage); not asked, it
                    # carries the usage as it always did here (clients read it there)
                    await send_sse(resp, _cmpl_chunk(cid, model, echoed if whole else "", _finish_reason(payload),
                                                      None if include_usage else usage(payload), payload.timings,
                                                      _answer_logprobs(state, payload, unseen) if whole else None))
                    if include_usage:
                        await send_sse(resp, {**_cmpl_chunk(cid, model, "", None), "choices": [],
                                              "usage": usage(payload)})
                    await send_sse(resp, "[DONE]")
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            events.close()
        return resp if resp is not None else web.Response(status=499)
    completion, _ = await JobEvents(request, state.scheduler, job, stream=False).until_done()
    raise_if_failed(completion)
    return web.json_response({
        "id": cid, "object": "text_completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "text": echoed + completion.text, "finish_reason": _finish_reason(completion),
                     "logprobs": _answer_logprobs(state, completion, unseen)}],
        "usage": usage(completion), "timings": completion.timings,
    })


async def _completion_job(state: ServerState, body: dict, prompt: Any, fim: list[int] | None, echo: bool,
                          max_tokens: int) -> tuple[Job, str, int]:
    """The Job for one completions prompt (`fim`: its fill-in-the-middle layout, when `suffix` was sent), the
    text its echo puts first ("" without `echo`) and how many of its first tokens that text lacks (unseen_tokens)."""
    tokens = fim if fim is not None else await off_loop(prompt_tokens, state, prompt,
                                                        fits_check(state.engine, param="prompt"))
    check_prompt_fits(state.engine, len(tokens), param="prompt")
    echoed = echoed_prompt(one_prompt(prompt), tokens, state.engine.tokenizer) if echo else ""
    fim_tokens = state.engine.tokenizer.fim
    logprobs = f.get_int(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)
    scored = echo and logprobs is not None       # the prompt's tokens scored (completion_echo.py)
    completion = fim is not None or laid_out_for_fim(tokens, fim_tokens)   # a suffix, or the client's own layout
    job = Job(api="openai", prompt=tokens,
              max_tokens=max_tokens, end_tokens=fim_tokens.end_ids if completion else frozenset(),
              completion=completion,
              sampling=parse_sampling(body, n_vocab=state.engine.n_vocab),
              stop=f.get_stop(body, "stop", limit=f.CODE_STOP_LIMIT), conversation=tokens_key(tokens),
              ignore_eos=f.get_bool(body, "ignore_eos"),
              answer_rule=await off_loop(json_format, body.get("response_format")),
              logprobs=logprobs, prompt_logprobs=logprobs if echo else None,
              # a scored prompt's own tokens are scored, never a context history's other split of its text
              exact_tokens=scored or (fim is None and sent_as_ids(prompt)))
    return job, echoed, unseen_tokens(one_prompt(prompt), tokens, state.engine.tokenizer)


async def _complete_several(request: web.Request, state: ServerState, body: dict, prompts: list, echo: bool,
                            max_tokens: int) -> web.StreamResponse:
    """`prompt` as an array of prompts (prompt_list.py): every prompt read and checked first (a bad one is a 400
    naming its position, nothing run), then each run as its own request, one after another, its choice at its
    position; the usage summed."""
    if body.get("stream"):
        raise APIError(400, f"'stream' with {len(prompts)} prompts in 'prompt' is not supported: send them "
                            "without 'stream', or one prompt per streamed request", param="stream")
    if body.get("suffix") is not None:
        raise APIError(400, f"'suffix' with {len(prompts)} prompts in 'prompt' is not supported: a code "
                            "completion takes one prompt", param="suffix")
    jobs = []
    for i, prompt in enumerate(prompts):
        try:
            jobs.append(await _completion_job(state, body, prompt, None, echo, max_tokens))
        except APIError as e:
            raise APIError(e.status, f"prompt {i} of the {len(prompts)} in 'prompt': {e.message}", param="prompt",
                           code=e.code) from None
    choices, usages = [], []
    for i, (job, echoed, unseen) in enumerate(jobs):
        # a client gone: the prompts left are not run (each would start, then end at the next look for it)
        if client_gone(request):
            return web.Response(status=499)
        completion, _ = await JobEvents(request, state.scheduler, job, stream=False).until_done()
        raise_if_failed(completion)
        if completion.finish_reason == "cancelled":   # its client left during it
            return web.Response(status=499)
        choices.append({"index": i, "text": echoed + completion.text, "finish_reason": _finish_reason(completion),
                        "logprobs": _answer_logprobs(state, completion, unseen)})
        usages.append(usage(completion))
    return web.json_response({
        "id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
        "model": body.get("model") or state.model_name, "choices": choices, "usage": summed_usage(usages)})


def _answer_logprobs(state: ServerState, c: Completion, unseen: int = 0) -> dict | None:
    """A completion's `logprobs` object: a scored prompt's tokens, then the generated ones', in one list (as
    OpenAI writes an echo's), their offsets running on from the prompt's; None when not asked."""
    if c.logprobs is None:
        return None
    prompt = c.prompt_logprobs or []
    return completion_logprobs(state.engine.tokenizer, prompt + c.logprobs, unseen=unseen if prompt else 0)[0]


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


def _finish_reason(c: Completion) -> str:
    return "length" if c.finish_reason == "length" else "stop"


def _calls_finish_reason(c: Completion) -> str:
    """An answer with tool calls: "tool_calls", unless max_tokens or the context cut it ("length", as OpenAI
    says): a call cut in the middle (its arguments as far as written, prompting.with_cut_call; Qwen3-Coder's
    XML parses without its closing tags) has lost arguments, and an agent must not run it as if it were whole."""
    return "length" if c.finish_reason == "length" else "tool_calls"


def _tool_calls(calls: list[dict]) -> list[dict]:
    return [{"id": call_id("call_", c), "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]


def _fim_tokens(state: ServerState, body: dict, max_tokens: int) -> list[int] | None:
    """With a `suffix` (Continue's autocomplete, the openai SDK's `completions.create(suffix=...)`): the prompt
    as the code before the cursor and the suffix as the code after it, laid out for fill-in-the-middle as
    llama.cpp's /infill lays them out (fim_prompt.py). None without one (an empty suffix to a model without
    FIM tokens reads as none); a 400 for a model without FIM tokens or a prompt that is not text."""
    suffix = f.get_str(body, "suffix")
    fim = state.engine.tokenizer.fim
    if suffix is None or (not suffix and not fim.usable):
        return None
    if not fim.usable:
        raise no_fim_error(state.model_name, fim.missing, param="suffix")
    prompt = one_prompt(body.get("prompt"))
    if not isinstance(prompt, str):
        raise APIError(400, "'prompt' must be a string (the code before the cursor) when 'suffix' is given",
                       param="prompt")
    return fim_prompt(state.engine.tokenizer, FimRequest(prefix=prompt, suffix=suffix, n_predict=max_tokens,
                                                         n_ctx=fim_context(state.engine),
                                                         spm=state.config.spm_infill)).tokens


def one_prompt(prompt: Any) -> Any:
    """A completions `prompt` as the one prompt it holds: an array holding one string or one array of ids is
    that string or array (the other forms as they are, for prompt_tokens to read or refuse)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        return prompt[0]
    return prompt


def sent_as_ids(prompt: Any) -> bool:
    """Whether a completions `prompt` is token ids (prompt_tokens' forms: `[ids]` or `[[ids]]`), not text."""
    return isinstance(one_prompt(prompt), list)


def prompt_tokens(state: ServerState, prompt: Any, fits: Callable[[int], None] | None = None) -> list[int]:
    """A completions `prompt`'s tokens (text tokenized; `fits`: prompting.tokenized's) or a 400 naming it."""
    prompt = one_prompt(prompt)
    if isinstance(prompt, str):
        return tokenized(state.engine, prompt, fits)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < state.engine.n_vocab]
        if bad:
            raise APIError(400, f"'prompt' has token ids outside the vocabulary (0..{state.engine.n_vocab - 1}): "
                                f"{bad[:5]}", param="prompt")
        return list(prompt)
    if prompt is None:
        raise APIError(400, "'prompt' is required", param="prompt")
    raise APIError(400, "'prompt' must be a string, an array of token ids, or an array holding one of those",
                   param="prompt")


def _chunk(cid: str, model: str, delta: dict, finish: str | None, extra: dict | None = None,
           logprobs: dict | None = None) -> dict:
    out = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
           "system_fingerprint": f"strata-{__version__}",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]}
    if extra:
        out.update(extra)
    return out


def _cmpl_chunk(cid: str, model: str, text: str, finish: str | None, use: dict | None = None,
                timings: dict | None = None, logprobs: dict | None = None) -> dict:
    out: dict[str, Any] = {"id": cid, "object": "text_completion", "created": int(time.time()), "model": model,
                           "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": logprobs}]}
    if use is not None:
        out["usage"] = use
    if timings is not None:
        out["timings"] = timings
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
                finish = _finish_reason(c)
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
