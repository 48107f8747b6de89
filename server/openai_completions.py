"""OpenAI's legacy `POST /v1/completions`: a prompt as text or token ids (or several, prompt_list.py), a code
completion with a `suffix` (fill-in-the-middle, fim_prompt.py), `echo` and the prompt scored with `logprobs`
(completion_echo.py, prompt_scoring.py: lm-eval-harness's loglikelihood), streamed or not.

Thin handlers as openai_api.py's (which keeps chat, models and what both share): validate the body into a `Job`,
run it through the scheduler, shape the answer. Not here: scheduling, error rendering.
"""

from __future__ import annotations

import codecs
import functools
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import web
from strata.server import fields as f
from strata.server.completion_echo import completion_max_tokens, echo_asked, echoed_prompt, unseen_tokens
from strata.server.errors import APIError
from strata.server.fim_prompt import FimRequest, fim_context, fim_prompt, laid_out_for_fim, no_fim_error
from strata.server.jobrun import JobEvents, client_gone, failure, open_sse, raise_if_failed, send_sse
from strata.server.jobs import Completion, Job, answer_room
from strata.server.keys import ServerState
from strata.server.off_loop import off_loop
from strata.server.openai_api import (
    MAX_TOP_LOGPROBS,
    common_checks,
    finish_reason,
    parse_sampling,
    ready_state,
    stream_error,
    token_text,
    usage,
    usage_asked,
)
from strata.server.prompt_list import several_prompts, summed_usage
from strata.server.prompting import check_prompt_fits, fits_check, tokenized, tokens_key
from strata.server.structured_output import json_format


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
        tokens.append(token_text(raw))
        if i >= unseen:
            before += raw
    return ({"tokens": tokens, "token_logprobs": [lp for _, lp, _ in entries],
             "top_logprobs": [None if alts is None else {token_text(tokenizer.token_bytes(a)): alp for a, alp in alts}
                              for _, _, alts in entries],
             "text_offset": offsets}, before)


async def completions(request: web.Request) -> web.StreamResponse:
    return await complete(request, await f.read_json_object(request))


async def complete(request: web.Request, body: dict) -> web.StreamResponse:
    """/v1/completions on a body already read (completion_api.py hands /completions bodies that name a model)."""
    state = ready_state(request)
    common_checks(body)
    if body.get("prompt") is None and "messages" in body:
        raise APIError(400, "'prompt' is required: chat 'messages' go to POST /v1/chat/completions", param="prompt")
    echo = echo_asked(body)
    max_tokens = completion_max_tokens(body, echo)
    include_usage = usage_asked(body)           # stream_options without stream: OpenAI's 400
    many = several_prompts(body.get("prompt"))
    jobs = await _prompt_jobs(state, body, many if many is not None else [body.get("prompt")], echo, max_tokens)
    model = body.get("model") or state.model_name
    if body.get("stream"):
        return await _stream(request, state, jobs, model, include_usage, whole=echo and max_tokens == 0)
    return await _answer(request, state, jobs, model)


async def _prompt_jobs(state: ServerState, body: dict, prompts: list, echo: bool,
                       max_tokens: int) -> list[tuple[Job, str, int]]:
    """Each prompt's _completion_job (one, or several: prompt_list.py), every one read and checked before any runs:
    a bad one of several is a 400 naming its position, nothing run (a bad field of the request's is its 400 as
    for one prompt). With `suffix`, each is a code completion with that suffix (as OpenAI's models that take a
    suffix answer a prompt list)."""
    jobs = []
    for i, prompt in enumerate(prompts):
        try:
            fim = None if body.get("suffix") is None else \
                await off_loop(_fim_tokens, state, body, prompt, max_tokens)   # tokenizes: seconds for megabytes
            jobs.append(await _completion_job(state, body, prompt, fim, echo, max_tokens))
        except APIError as e:
            if len(prompts) == 1 or e.param != "prompt":   # another field's (suffix, logprobs): the request's
                raise
            raise APIError(e.status, f"prompt {i} of the {len(prompts)} in 'prompt': {e.message}", param="prompt",
                           code=e.code) from None
    return jobs


async def _completion_job(state: ServerState, body: dict, prompt: Any, fim: list[int] | None, echo: bool,
                          max_tokens: int) -> tuple[Job, str, int]:
    """The Job for one completions prompt (`fim`: its fill-in-the-middle layout, when `suffix` was sent), the
    text its echo puts first ("" without `echo`) and how many of its first tokens that text lacks (unseen_tokens)."""
    room = answer_room(max_tokens)     # nothing generated (a prompt only scored): it may fill the context
    tokens = fim if fim is not None else await off_loop(prompt_tokens, state, prompt,
                                                        fits_check(state.engine, param="prompt", room=room))
    check_prompt_fits(state.engine, len(tokens), param="prompt", room=room)
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


async def _answer(request: web.Request, state: ServerState, jobs: list[tuple[Job, str, int]],
                  model: str) -> web.StreamResponse:
    """The answer not streamed: the prompts run one after another, each as its own request, its choice at its
    position (`index`); the usage summed; `timings` for one prompt only (several: each its own, not summed)."""
    choices, usages = [], []
    for i, (job, echoed, unseen) in enumerate(jobs):
        # a client gone: the prompts left are not run (each would start, then end at the next look for it)
        if client_gone(request):
            return web.Response(status=499)
        completion, _ = await JobEvents(request, state.scheduler, job, stream=False).until_done()
        raise_if_failed(completion)
        if completion.finish_reason == "cancelled":   # its client left during it
            return web.Response(status=499)
        choices.append({"index": i, "text": echoed + completion.text, "finish_reason": finish_reason(completion),
                        "logprobs": _answer_logprobs(state, completion, unseen)})
        usages.append(usage(completion))
    out = {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()),
           "model": model, "choices": choices, "usage": summed_usage(usages)}
    if len(jobs) == 1:
        out["timings"] = completion.timings
    return web.json_response(out)


async def _stream(request: web.Request, state: ServerState, jobs: list[tuple[Job, str, int]], model: str,
                  include_usage: bool, whole: bool) -> web.StreamResponse:
    """SSE for the prompts, one after another (several as OpenAI streams a prompt list: each prompt's chunks with
    `choices[0].index` its position, _stream_prompt), then OpenAI's usage chunk when asked (summed over the
    prompts) and [DONE]. A client gone, or a prompt failed (its error event sent), ends it: the prompts left are
    not run. `whole`: the echo is each prompt's whole answer (max_tokens 0), one chunk."""
    cid = f"cmpl-{uuid.uuid4().hex[:24]}"
    resp: web.StreamResponse | None = None
    usages = []
    try:
        for i, (job, echoed, unseen) in enumerate(jobs):
            if i and client_gone(request):
                break
            chunk = functools.partial(_cmpl_chunk, cid, model, index=i)
            resp, done = await _stream_prompt(request, resp, state, job, echoed, unseen, chunk, whole, include_usage)
            if done is None:
                break
            usages.append(usage(done))
        else:
            if include_usage:
                await send_sse(resp, {**_cmpl_chunk(cid, model, "", None), "choices": [],
                                      "usage": summed_usage(usages)})
            await send_sse(resp, "[DONE]")
    except (ConnectionResetError, ConnectionError):
        pass
    return resp if resp is not None else web.Response(status=499)


async def _stream_prompt(request: web.Request, resp: web.StreamResponse | None, state: ServerState, job: Job,
                         echoed: str, unseen: int, chunk: Callable[..., dict], whole: bool,
                         include_usage: bool) -> tuple[web.StreamResponse | None, Completion | None]:
    """One prompt's chunks (`chunk`: _cmpl_chunk with its id, model and index): its echo first, its text and
    logprobs as they come, a last chunk with its finish_reason. Opens the stream at its first event when no prompt
    before it did. Returns the stream and the prompt's completion; None for one that failed (its error event sent;
    not sent yet, a status is raised) or was cancelled (its client left)."""
    scored = job.prompt_logprobs is not None     # the prompt's tokens scored (completion_echo.py)
    try:
        events = JobEvents(request, state.scheduler, job)
    except APIError as e:               # the queue full when a later prompt comes: the stream began
        if resp is None:
            raise
        await send_sse(resp, stream_error(e))
        return resp, None
    first = True
    sent = b""                          # the bytes of the tokens whose logprobs were sent (their text_offset)
    try:
        async for kind, payload in events:
            err = failure(payload) if kind == "done" else None
            if first:
                first = False
                if resp is None and err is not None:   # ended unstarted (queued at a stop): a status the SDK
                    raise err                          # retries, not a 200
                if resp is None:
                    resp = await open_sse(request)
                # OpenAI's echo: the prompt's text is the first chunk; not for a prompt of a list that never began
                if echoed and not (scored or whole) and err is None:
                    await send_sse(resp, chunk(echoed, None))
            if kind == "prompt_logprobs" and not whole:   # a scored echo: once its prompt is read
                lps, sent = completion_logprobs(state.engine.tokenizer, payload, unseen=unseen)
                await send_sse(resp, chunk(echoed, None, logprobs=lps))
            elif kind == "text":
                await send_sse(resp, chunk(payload, None))
            elif kind == "logprobs":
                lps, sent = completion_logprobs(state.engine.tokenizer, payload, sent)
                await send_sse(resp, chunk("", None, logprobs=lps))
            elif err is not None:
                await send_sse(resp, stream_error(err))
                return resp, None
            elif kind == "done":
                # asked for OpenAI's usage chunk, the last chunk is as OpenAI's (no usage); not asked, it
                # carries the prompt's usage as it always did here (clients read it there)
                await send_sse(resp, chunk(echoed if whole else "", finish_reason(payload),
                                           None if include_usage else usage(payload), payload.timings,
                                           _answer_logprobs(state, payload, unseen) if whole else None))
                return resp, None if payload.finish_reason == "cancelled" else payload
    finally:
        events.close()
    return resp, None


def _answer_logprobs(state: ServerState, c: Completion, unseen: int = 0) -> dict | None:
    """A completion's `logprobs` object: a scored prompt's tokens, then the generated ones', in one list (as
    OpenAI writes an echo's), their offsets running on from the prompt's; None when not asked."""
    if c.logprobs is None:
        return None
    prompt = c.prompt_logprobs or []
    return completion_logprobs(state.engine.tokenizer, prompt + c.logprobs, unseen=unseen if prompt else 0)[0]


def _fim_tokens(state: ServerState, body: dict, prompt: Any, max_tokens: int) -> list[int] | None:
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
    prompt = one_prompt(prompt)
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


def _cmpl_chunk(cid: str, model: str, text: str, finish: str | None, use: dict | None = None,
                timings: dict | None = None, logprobs: dict | None = None, index: int = 0) -> dict:
    out: dict[str, Any] = {"id": cid, "object": "text_completion", "created": int(time.time()), "model": model,
                           "choices": [{"index": index, "text": text, "finish_reason": finish, "logprobs": logprobs}]}
    if use is not None:
        out["usage"] = use
    if timings is not None:
        out["timings"] = timings
    return out

