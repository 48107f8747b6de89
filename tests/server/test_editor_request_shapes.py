"""The requests editors' code completion really sends, over real HTTP (a real `strata serve` app, engine and
scheduler on a tiny model with Qwen2.5-Coder's FIM tokens): llama.vscode's and llama.vim's /infill bodies with their
warm-ups (n_predict 0, the ring buffer's chunks with a `time` field, `samplers`, `cache_prompt`, llama.vim's
t_max_prompt_ms 1 and response_fields [""]), Continue's autocomplete through /v1/completions (its template laid
out by the client, or `suffix`) with the stop words it adds (17 for Python with Qwen2.5-Coder's template), and
`--spm-infill` (suffix-prefix-middle) as the history the context holds afterwards. The shapes are those of the
plugins' sources (llama.vscode src/llama-server.ts, llama.vim autoload/llama.vim, Continue's autocomplete
templates and stop words)."""

from __future__ import annotations

import json
import time

import pytest
import requests
from strata.server.fim_prompt import ExtraChunk, FimRequest, fim_prompt

from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model
from tests.server.live import LiveServer

PREFIX = "import os\n\n\ndef f(x):\n" + "    y = x + 1\n" * 12
SUFFIX = "\n    return y\n\n\nprint(f(2))\n"
CHUNK = "def g():\n    return 1\n" * 5
QWEN_STOPS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
              "<|file_sep|>", "<|im_start|>", "<|im_end|>"]
# Continue's autocomplete for a Python file: the template's, multi-line, common, then "\n" + each top-level keyword
CONTINUE_PY_STOPS = QWEN_STOPS + ["\n\n", "\r\n\r\n", "/src/", "#- coding: utf-8", "```", "\ndef", "\nclass",
                                  '\n"""#']


def _model(tiny_model_factory, folder):
    plain = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, added_tokens=FIM_TEXTS)
    return str(fim_model(plain, folder / "coder.gguf"))


@pytest.fixture(scope="module")
def server(tiny_model_factory, tmp_path_factory):
    model = _model(tiny_model_factory, tmp_path_factory.mktemp("editor_shapes"))
    with LiveServer(model=model, ctx=4096, batch=4, slot_ctx=4096, threads=1, conversation_cache_mib=0) as s:
        yield s


@pytest.fixture(scope="module")
def spm_server(tiny_model_factory, tmp_path_factory):
    model = _model(tiny_model_factory, tmp_path_factory.mktemp("editor_shapes_spm"))
    with LiveServer(model=model, ctx=4096, batch=4, slot_ctx=4096, threads=1, conversation_cache_mib=0,
                    spm_infill=True) as s:
        yield s


def holds(server: LiveServer, tokens: list[int]) -> bool:
    return any(list(c.tokens)[:len(tokens)] == tokens for c in server.state.scheduler.table)


def sse(r: requests.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: ") and line != b"data: [DONE]"]


def test_llama_vscode_warm_up_then_completion_reuses_the_chunks(server):
    """llama.vscode: the ring buffer's chunks ({text, time, filename}) warmed with n_predict 0, `samplers: []`,
    t_max_predict_ms 1; then the completion with the same chunks reads only what follows them."""
    chunks = [{"text": CHUNK, "time": int(time.time() * 1000), "filename": "/home/u/proj/src/g.py"}]
    warm = {"input_prefix": "", "input_suffix": "", "input_extra": chunks, "prompt": "", "n_predict": 0,
            "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1}
    w = requests.post(server.url + "/infill", json=warm, timeout=60)
    assert w.status_code == 200, w.text
    assert w.json()["content"] == "" and w.json()["tokens_predicted"] == 0
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": chunks, "prompt": "    z = ",
            "n_predict": 16, "top_k": 40, "top_p": 0.99, "stream": False, "samplers": ["top_k", "top_p", "infill"],
            "cache_prompt": True, "n_indent": 4, "t_max_prompt_ms": 500, "t_max_predict_ms": 500}
    r = requests.post(server.url + "/infill", json=body, timeout=60)
    assert r.status_code == 200, r.text
    a = r.json()
    head = w.json()["tokens_evaluated"] - 3          # the warm-up ends [FIM_PRE][FIM_SUF][FIM_MID]
    assert a["timings"]["cache_n"] >= head > 0 and a["tokens_evaluated"] > head


def test_llama_vim_bodies_with_reltime_chunks_and_its_warm_up(server):
    """llama.vim: the chunks' `time` is Vim's reltime() (a list); the warm-up sends t_max_prompt_ms 1 and
    response_fields [""] (an empty object back) and must still read its chunks: the completion after it reuses
    them (llama.cpp does not act on t_max_prompt_ms, and a warm-up cut at 1 ms would read nothing)."""
    chunks = [{"text": CHUNK.replace("g", "h"), "time": [1733412345, 123456], "filename": "src/h.py"}]
    warm = {"input_prefix": "", "input_suffix": "", "input_extra": chunks, "prompt": "", "n_predict": 0,
            "temperature": 0.0, "stream": False, "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 1,
            "t_max_predict_ms": 1, "response_fields": [""]}
    w = requests.post(server.url + "/infill", json=warm, timeout=60)
    assert w.status_code == 200 and w.json() == {}, w.text
    fields = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/predicted_n", "truncated", "tokens_cached"]
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": chunks, "prompt": "    z = ",
            "n_predict": 16, "stop": [], "n_indent": 4, "top_k": 40, "top_p": 0.90, "stream": False,
            "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "t_max_prompt_ms": 500,
            "t_max_predict_ms": 250, "response_fields": fields}
    r = requests.post(server.url + "/infill", json=body, timeout=60)
    assert r.status_code == 200, r.text
    a = r.json()
    assert set(a) == set(fields)
    n_chunk = len(server.state.engine.tokenizer.encode(chunks[0]["text"], special=False, add_bos=False))
    assert a["tokens_cached"] - a["timings/prompt_n"] - a["timings/predicted_n"] >= n_chunk   # reused the chunk


@pytest.mark.parametrize("form", ["template", "suffix"])
def test_continue_autocomplete_with_its_stop_words(server, form):
    """Continue's autocomplete: a stream from /v1/completions with its template (or `suffix`) and 17 stop words
    (was a 400: at most 16)."""
    if form == "template":
        body = {"model": "coder", "prompt": "<|fim_prefix|>" + PREFIX + "<|fim_suffix|>" + SUFFIX + "<|fim_middle|>"}
    else:
        body = {"model": "coder", "prompt": PREFIX, "suffix": SUFFIX, "top_p": 1, "frequency_penalty": 0,
                "presence_penalty": 0}
    body.update(max_tokens=8, temperature=0.01, stop=CONTINUE_PY_STOPS, stream=True)
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200, r.text
        events = sse(r)
    assert events and events[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    over = {**body, "stop": [f"s{i}" for i in range(65)]}
    r = requests.post(server.url + "/v1/completions", json=over, timeout=60)
    assert r.status_code == 400 and "at most 64" in r.json()["error"]["message"]


def test_spm_infill_reads_the_suffix_first(spm_server):
    """--spm-infill: /infill and /v1/completions with a suffix lay [FIM_SUF]suffix[FIM_PRE]prefix[FIM_MID] out."""
    tok = spm_server.state.engine.tokenizer
    r = requests.post(spm_server.url + "/infill", json={
        "input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "    z = ", "n_predict": 2, "temperature": 0,
        "input_extra": [{"filename": "g.py", "text": CHUNK}]}, timeout=60)
    assert r.status_code == 200, r.text
    expected = fim_prompt(tok, FimRequest(prefix=PREFIX, suffix=SUFFIX, prompt="    z = ", n_ctx=4096, n_predict=2,
                                          extra=(ExtraChunk("g.py", CHUNK),), spm=True)).tokens
    fim = tok.fim
    assert expected.index(fim.suf) < expected.index(fim.pre) < expected.index(fim.mid) == len(expected) - 1
    assert r.json()["tokens_evaluated"] == len(expected) and holds(spm_server, expected)
    c = requests.post(spm_server.url + "/v1/completions", json={
        "model": "coder", "prompt": "def area(r):\n    return ", "suffix": "\n\nprint(area(2))\n", "max_tokens": 2,
        "temperature": 0}, timeout=60)
    assert c.status_code == 200, c.text
    expected = fim_prompt(tok, FimRequest(prefix="def area(r):\n    return ", suffix="\n\nprint(area(2))\n",
                                          n_ctx=4096, n_predict=2, spm=True)).tokens
    assert c.json()["usage"]["prompt_tokens"] == len(expected) and holds(spm_server, expected)


@pytest.mark.parametrize("path", ["/completion", "/completions"])
def test_continues_llamacpp_provider_reads_content_events(server, path):
    """Continue's `llama.cpp` provider: its template in `prompt`, no `model`, llama.cpp's field names; it reads each
    event's `content` (before: a 404 on /completion, and OpenAI chunks without `content` on /completions)."""
    body = {"prompt": "<|fim_prefix|>" + PREFIX + "<|fim_suffix|>" + SUFFIX + "<|fim_middle|>", "stream": True,
            "n_predict": 6, "stop": CONTINUE_PY_STOPS, "top_k": 40, "top_p": 0.9, "temperature": 0,
            "frequency_penalty": 0, "presence_penalty": 0, "min_p": 0.05}
    with requests.post(server.url + path, json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200, r.text
        events = sse(r)
    assert events[-1]["stop"] is True and all(e["stop"] is False for e in events[:-1])
    whole = requests.post(server.url + path, json={**body, "stream": False}, timeout=60).json()
    assert "".join(e["content"] for e in events) == whole["content"] and whole["tokens_predicted"] <= 6
    fim = server.state.engine.tokenizer.fim
    prompt = server.state.engine.tokenize(body["prompt"], special=True)
    assert prompt[-1] == fim.mid and whole["tokens_evaluated"] == len(prompt) and holds(server, list(prompt))


def test_completions_with_a_model_is_still_openais(server):
    r = requests.post(server.url + "/completions", json={"model": "coder", "prompt": "def f(", "max_tokens": 3,
                                                         "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "text_completion" and r.json()["usage"]["completion_tokens"] <= 3
