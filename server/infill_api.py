"""llama.cpp's `POST /infill`: code completion (fill-in-the-middle) for editors (llama.vscode, llama.vim).

Thin handler: the body's fields into a `Job` (the prompt laid out by fim_prompt.py), run through the
scheduler as every request is (slots, the queue, cancel on disconnect, metrics under the api "infill"), the
answer in llama.cpp's shape: `content`, `stop`, `stop_type`, `tokens_predicted`, `tokens_evaluated`,
`tokens_cached`, `truncated`, `has_new_line`, `timings`; streamed as llama.cpp streams /completion (one
`data:` event per piece with `stop: false`, a last one with `stop: true` and the numbers; no [DONE]).
Fields read: input_prefix and input_suffix (required), prompt, input_extra [{filename, text}], n_predict (or
max_tokens; -1: no limit; 0: the prompt is read and kept, nothing is answered: llama.vscode's warm-up of its
context chunks), n_indent, t_max_prompt_ms, t_max_predict_ms, stop, stream, temperature, top_k, top_p, min_p, repeat_penalty,
presence_penalty, frequency_penalty, seed, ignore_eos, response_fields. t_max_prompt_ms (which llama.cpp reads and
does not act on) ends a completion whose prompt is still being read that long after it began, with nothing
answered (stop_type "limit"), the part read kept in its slot for the next keystroke's request: beside an agent
on two cores an editor's completion otherwise took 8-11 s, long after the user typed on, and slowed the agent's
turns twofold. Other /completion fields (cache_prompt, samplers, id_slot, lora) are ignored.

`InfillEnd` is what the scheduler feeds the answer's text (Job.call_end): it ends the answer at a line less
indented than n_indent (that line left out of `content`) and, after t_max_predict_ms, at the next new line.
Not here: the layout (fim_prompt.py), the FIM tokens (strata.engine.fim), scheduling.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web
from strata.engine.sampling import SamplingParams
from strata.server import fields as f
from strata.server.errors import APIError, error_body
from strata.server.fim_prompt import ExtraChunk, FimRequest, fim_context, fim_prompt, no_fim_error
from strata.server.jobrun import JobEvents, failure, open_sse, raise_if_failed, send_sse
from strata.server.jobs import Completion, Job
from strata.server.off_loop import off_loop
from strata.server.openai_api import ready_state
from strata.server.prompting import check_prompt_fits, tokens_key

MAX_EXTRA = 1024               # input_extra chunks (llama.vscode keeps 16 by default)


class InfillEnd:
    """Fed the answer's text piece by piece (on the scheduler's thread); `feed` says True when the answer must
    end: a line after the first that starts less indented than `n_indent` characters (spaces or tabs; the
    line is cut from the answer: `cut_at`), or a new line written once `t_max_predict_ms` have passed since the
    first piece. llama.cpp's rules for the same fields."""

    def __init__(self, n_indent: int, t_max_predict_ms: int, clock=time.monotonic) -> None:
        self.n_indent = n_indent
        self.t_max_s = t_max_predict_ms / 1000.0
        self._clock = clock
        self._started: float | None = None
        self.text = ""
        self.cut_at: int | None = None     # where `content` ends when a line was too little indented
        self.ended = False                 # ended by these rules (llama.cpp's stop_type "limit")

    def feed(self, piece: str) -> bool:
        if self.ended:
            return True
        now = self._clock()
        if self._started is None:
            self._started = now
        before = len(self.text)
        self.text += piece
        if self.n_indent > 0 and self._under_indented(before):
            self.ended = True
        elif self.t_max_s > 0 and "\n" in piece and now - self._started > self.t_max_s:
            self.ended = True
        return self.ended

    def _under_indented(self, before: int) -> bool:
        """Whether a line begun since `before` (after the first line) starts with less indentation."""
        start = self.text.rfind("\n", 0, max(before, 1)) + 1   # the line open before the piece
        while True:
            nl = self.text.find("\n", start)
            if start > 0:                  # a line after the first
                pos = start
                while pos < len(self.text) and self.text[pos] in " \t":
                    pos += 1
                if pos < len(self.text) and self.text[pos] != "\n" and pos - start < self.n_indent:
                    self.cut_at = start
                    return True
            if nl < 0:
                return False
            start = nl + 1

    def content(self, text: str) -> str:
        return text if self.cut_at is None else text[:self.cut_at]


def _extra(body: dict) -> tuple[ExtraChunk, ...]:
    raw = body.get("input_extra")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise APIError(400, "'input_extra' must be an array of {\"filename\": string, \"text\": string}",
                       param="input_extra")
    if len(raw) > MAX_EXTRA:
        raise APIError(400, f"'input_extra' has {len(raw)} chunks; at most {MAX_EXTRA}", param="input_extra")
    return tuple(ExtraChunk(filename=f.field(c, w, "filename", str, "a string") or "tmp",
                            text=f.field(c, w, "text", str, "a string", required=True))
                 for w, c in f.objects(raw, "input_extra"))


def llamacpp_sampling(body: dict, n_vocab: int) -> SamplingParams:
    """llama.cpp's /completion sampling fields with its defaults (temperature 0.8, top_k 40, top_p 0.95, min_p
    0.05); a seed of -1 is a random one."""
    seed = f.get_int(body, "seed", None, -1, (1 << 63) - 1)
    try:
        return SamplingParams(
            temperature=f.get_number(body, "temperature", 0.8, 0.0, 2.0),
            top_k=f.get_int(body, "top_k", 40, 0, n_vocab),
            top_p=f.get_number(body, "top_p", 0.95, 1e-9, 1.0),
            min_p=f.get_number(body, "min_p", 0.05, 0.0, 1.0),
            repeat_penalty=f.get_number(body, "repeat_penalty", 1.0, 1e-6, 10.0),
            presence_penalty=f.get_number(body, "presence_penalty", 0.0, -2.0, 2.0),
            frequency_penalty=f.get_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
            seed=None if seed == -1 else seed)
    except ValueError as e:
        raise APIError(400, str(e)) from None


def response_fields(body: dict) -> tuple[str, ...]:
    raw = body.get("response_fields")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise APIError(400, "'response_fields' must be an array of strings", param="response_fields")
    return tuple(raw)


def only_fields(answer: dict, names: tuple[str, ...]) -> dict:
    """llama.cpp's `response_fields`: only the named fields, a nested one named by its path ("timings/prompt_n")
    and returned under that path as its key; fields that are not there are left out."""
    if not names:
        return answer
    out = {}
    for name in names:
        value: Any = answer
        for part in name.split("/"):
            if not isinstance(value, dict) or part not in value:
                break
            value = value[part]
        else:
            out[name] = value
    return out


async def infill(request: web.Request) -> web.StreamResponse:
    state = ready_state(request)
    body = await f.read_json_object(request)
    fim = state.engine.tokenizer.fim
    if not fim.usable:
        raise no_fim_error(state.model_name, fim.missing)
    prefix = f.get_str(body, "input_prefix", required=True)
    suffix = f.get_str(body, "input_suffix", required=True)
    n_predict = f.get_int(body, "n_predict", None, -1, f.MAX_TOKENS_LIMIT)
    if n_predict is None:
        n_predict = f.get_int(body, "max_tokens", -1, -1, f.MAX_TOKENS_LIMIT)
    capacity = fim_context(state.engine)
    # laid out and tokenized off the event loop: an input_prefix of megabytes took seconds there, every client's
    laid = await off_loop(fim_prompt, state.engine.tokenizer, FimRequest(
        prefix=prefix, suffix=suffix, prompt=f.get_str(body, "prompt", ""), extra=_extra(body),
        n_ctx=capacity, n_predict=n_predict, spm=state.config.spm_infill))
    check_prompt_fits(state.engine, len(laid.tokens), param="input_prefix")
    end = InfillEnd(f.get_int(body, "n_indent", 0, 0, 1 << 16), f.get_int(body, "t_max_predict_ms", 0, 0, 1 << 31))
    # the prompt's time bound; not on a warm-up (n_predict 0): it exists to read the prompt, and llama.vim sends it
    # with t_max_prompt_ms 1 (llama.cpp, which does not act on the field, reads it whole)
    t_max_prompt_ms = f.get_int(body, "t_max_prompt_ms", 0, -1, 1 << 31)
    names = response_fields(body)
    job = Job(api="infill", prompt=laid.tokens,
              max_tokens=1 if n_predict == 0 else f.MAX_TOKENS_LIMIT if n_predict < 0 else n_predict,
              sampling=llamacpp_sampling(body, state.engine.n_vocab), stop=f.get_stop(body, "stop", limit=f.CODE_STOP_LIMIT),
              conversation=tokens_key(laid.tokens), ignore_eos=f.get_bool(body, "ignore_eos"),
              call_end=end, end_tokens=fim.end_ids, completion=True,
              max_prompt_s=t_max_prompt_ms / 1000.0 if t_max_prompt_ms > 0 and n_predict != 0 else 0.0)
    model = f.get_str(body, "model") or state.model_name
    if f.get_bool(body, "stream") and n_predict != 0:
        return await stream_answer(request, state, job, end, model, laid.truncated, names)
    completion, _ = await JobEvents(request, state.scheduler, job, stream=False).until_done()
    raise_if_failed(completion)
    return web.json_response(only_fields(final_answer(completion, end, model, laid.truncated, n_predict == 0),
                                         names))


def final_answer(c: Completion, end: InfillEnd, model: str, truncated: bool, warm_up: bool = False) -> dict:
    """The last (or only) answer object; `warm_up` (n_predict 0): the prompt was read, nothing is answered."""
    content = "" if warm_up else end.content(c.text)
    n_out = 0 if warm_up else len(c.tokens)
    if c.stop_sequence is not None:
        stop_type = "word"
    elif c.finish_reason == "length" or end.ended or warm_up:
        stop_type = "limit"
    else:
        stop_type = "eos"
    timings = c.timings
    if warm_up:
        timings = {**timings, "predicted_n": 0, "predicted_ms": 0.0, "predicted_per_token_ms": 0.0,
                   "predicted_per_second": 0.0}
    return {"index": 0, "content": content, "tokens": [], "id_slot": -1, "stop": True, "model": model,
            "tokens_predicted": n_out, "tokens_evaluated": c.prompt_tokens, "has_new_line": "\n" in content,
            "truncated": truncated, "stop_type": stop_type, "stopping_word": c.stop_sequence or "",
            "tokens_cached": c.prompt_tokens + n_out, "timings": timings}


async def stream_answer(request: web.Request, state: Any, job: Job, end: InfillEnd, model: str, truncated: bool,
                  names: tuple[str, ...]) -> web.StreamResponse:
    """llama.cpp's stream: `data: {"content": piece, "stop": false}` events, then the final answer (`content`
    empty, `stop` true); an error after the start is a `data: {"error": ...}` event."""
    resp: web.StreamResponse | None = None
    events = JobEvents(request, state.scheduler, job)
    try:
        async for kind, payload in events:
            if resp is None:
                if kind == "done":     # ended unstarted (queued at a stop): a status, not a 200
                    raise_if_failed(payload)
                resp = await open_sse(request)
            if kind == "text":
                await send_sse(resp, {"index": 0, "content": payload, "tokens": [], "stop": False, "id_slot": -1,
                                      "tokens_evaluated": len(job.prompt)})
            elif kind == "done" and (err := failure(payload)) is not None:
                await send_sse(resp, error_body("openai", err.status, err.message, err.param, err.code))
            elif kind == "done":
                await send_sse(resp, only_fields({**final_answer(payload, end, model, truncated), "content": ""},
                                                 names))
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        events.close()
    return resp if resp is not None else web.Response(status=499)
