"""llama.cpp's own `POST /completion`, which its server also serves at `/completions`: what Continue's "llama.cpp"
provider sends for autocomplete (`{prompt, stream: true, n_predict, stop, temperature, top_k, top_p, min_p, ...}`,
its model's fill-in-the-middle template laid out in `prompt` by the client) and reads back: each event's `content`.
Answered as /infill answers (infill_api.final_answer and its stream), so a FIM prompt laid out by the client is a
code completion as on /v1/completions (fim_prompt.laid_out_for_fim: its FIM end tokens, kept out of the cache).

`POST /completions` is both llama.cpp's (this) and the OpenAI one without its /v1
(openai_completions.completions): a body that names a `model` (the openai SDK always does; Continue's llama.cpp provider never does) is an OpenAI one.

Fields read: prompt (a string, special-token texts read as tokens, or token ids), n_predict (or max_tokens; -1: no
limit), stop, stream, n_indent, t_max_predict_ms, response_fields, ignore_eos and llama.cpp's sampling fields with
its defaults; other fields (cache_prompt, samplers, mirostat, id_slot, ...) are ignored.
Not here: the answer's shape (infill_api.py), scheduling.
"""

from __future__ import annotations

from aiohttp import web
from strata.server import fields as f
from strata.server import openai_completions
from strata.server.fim_prompt import laid_out_for_fim
from strata.server.infill_api import (
    InfillEnd,
    final_answer,
    llamacpp_sampling,
    only_fields,
    response_fields,
    stream_answer,
)
from strata.server.jobrun import JobEvents, raise_if_failed
from strata.server.jobs import Job
from strata.server.off_loop import off_loop
from strata.server.openai_api import ready_state
from strata.server.openai_completions import prompt_tokens, sent_as_ids
from strata.server.prompting import check_prompt_fits, fits_check, tokens_key


async def completion(request: web.Request) -> web.StreamResponse:
    """POST /completion."""
    return await _answer(request, await f.read_json_object(request))


async def completions(request: web.Request) -> web.StreamResponse:
    """POST /completions: llama.cpp's without a `model`, the OpenAI one with one."""
    body = await f.read_json_object(request)
    if body.get("model") is not None:
        return await openai_completions.complete(request, body)
    return await _answer(request, body)


async def _answer(request: web.Request, body: dict) -> web.StreamResponse:
    state = ready_state(request)
    tokens = await off_loop(prompt_tokens, state, body.get("prompt"), fits_check(state.engine, param="prompt"))
    check_prompt_fits(state.engine, len(tokens), param="prompt")
    n_predict = f.get_int(body, "n_predict", None, -1, f.MAX_TOKENS_LIMIT)
    if n_predict is None:
        n_predict = f.get_int(body, "max_tokens", -1, -1, f.MAX_TOKENS_LIMIT)
    fim = state.engine.tokenizer.fim
    code = laid_out_for_fim(tokens, fim)
    end = InfillEnd(f.get_int(body, "n_indent", 0, 0, 1 << 16), f.get_int(body, "t_max_predict_ms", 0, 0, 1 << 31))
    names = response_fields(body)
    job = Job(api="completion", prompt=tokens,
              max_tokens=1 if n_predict == 0 else f.MAX_TOKENS_LIMIT if n_predict < 0 else n_predict,
              sampling=llamacpp_sampling(body, state.engine.n_vocab),
              stop=f.get_stop(body, "stop", limit=f.CODE_STOP_LIMIT), conversation=tokens_key(tokens),
              ignore_eos=f.get_bool(body, "ignore_eos"), call_end=end,
              end_tokens=fim.end_ids if code else frozenset(), completion=code,
              exact_tokens=sent_as_ids(body.get("prompt")))
    model = f.get_str(body, "model") or state.model_name
    if f.get_bool(body, "stream") and n_predict != 0:
        return await stream_answer(request, state, job, end, model, False, names)
    done, _ = await JobEvents(request, state.scheduler, job, stream=False).until_done()
    raise_if_failed(done)
    return web.json_response(only_fields(final_answer(done, end, model, False, n_predict == 0), names))
