"""Code completion over real HTTP (a real `strata serve` app, engine and scheduler on a tiny model with
Qwen2.5-Coder's FIM tokens, --batch 4): llama.cpp's `POST /infill` (its answer and stream shapes, response_fields,
n_predict 0, n_indent, the FIM end tokens, cancellation when the editor gives up) and `suffix` on
`/v1/completions` through the openai SDK; the prompt each lays out is the context's history afterwards. A model
without FIM tokens (the tiny ChatML model, as SmolLM2) gets a 400 that names it; bad bodies get 400s."""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests
from strata.server.fim_prompt import ExtraChunk, FimRequest, fim_prompt

from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model
from tests.server.live import LiveServer

PRE, SUF, MID, PAD, REP, SEP = range(512, 518)
DEF, NL_INDENT, SELF, NL, SPACE_SELF, X = 450, 326, 323, 13, 295, 123     # "def", "\n    ", "self", "\n", " self", "x"
BODY = {"input_prefix": "def f(x):\n    ", "input_suffix": "\n    return y\n", "prompt": "y =",
        "input_extra": [{"filename": "util.py", "text": "import os\n"}]}


@pytest.fixture(scope="module")
def server(tiny_model_factory, tmp_path_factory):
    folder = tmp_path_factory.mktemp("fim")
    plain = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, added_tokens=FIM_TEXTS)
    with LiveServer(model=str(fim_model(plain, folder / "coder.gguf")), ctx=4096, batch=4, slot_ctx=4096,
                    threads=1, conversation_cache_mib=64) as s:
        yield s


@pytest.fixture(scope="module")
def scripted(tiny_model_factory, tmp_path_factory):
    """Always answers "def\\n    self\\n self" then `<|file_sep|>` (then "x"): after FIM_MID, greedy decoding walks
    the script (tests/fixtures/tiny_gguf.py `script`)."""
    folder = tmp_path_factory.mktemp("fim_scripted")
    plain = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3, added_tokens=FIM_TEXTS,
                               script=(MID, DEF, NL_INDENT, SELF, NL, SPACE_SELF, SEP, X, 2))
    with LiveServer(model=str(fim_model(plain, folder / "scripted.gguf")), ctx=4096, batch=4, slot_ctx=4096,
                    threads=1, conversation_cache_mib=0) as s:
        yield s


def histories(server: LiveServer) -> list[list[int]]:
    return [list(c.tokens) for c in server.state.scheduler.table]


def holds(server: LiveServer, tokens: list[int]) -> bool:
    return any(h[:len(tokens)] == tokens for h in histories(server))


def laid_out(server: LiveServer, **req) -> list[int]:
    # n_ctx: the slots' (--slot-ctx 4096, as --ctx), which the server sizes a completion by (fim_context)
    return fim_prompt(server.state.engine.tokenizer, FimRequest(n_ctx=4096, **req)).tokens


def test_infill_answers_in_llamacpps_shape_and_reads_llamacpps_layout(server):
    r = requests.post(server.url + "/infill", json={**BODY, "n_predict": 6, "temperature": 0}, timeout=60)
    assert r.status_code == 200, r.text
    a = r.json()
    assert {"content", "stop", "stop_type", "tokens_predicted", "tokens_evaluated", "tokens_cached", "truncated",
            "timings", "has_new_line", "stopping_word"} <= set(a)
    assert a["stop"] is True and a["stop_type"] == "limit" and a["tokens_predicted"] == 6
    expected = laid_out(server, prefix=BODY["input_prefix"], suffix=BODY["input_suffix"], prompt="y =",
                        extra=(ExtraChunk("util.py", "import os\n"),), n_predict=6)
    assert expected[0] == REP and expected[-1] == MID and expected.count(SEP) == 2
    assert a["tokens_evaluated"] == len(expected) and holds(server, expected)
    t = a["timings"]
    assert t["prompt_n"] + t["cache_n"] == len(expected) and t["predicted_n"] == 6


def test_the_stream_is_llamacpps_and_says_what_the_answer_says(server):
    body = {**BODY, "n_predict": 8, "temperature": 0, "stream": True}
    with requests.post(server.url + "/infill", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: ")]
    assert all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    assert events[-1]["content"] == "" and events[-1]["tokens_predicted"] == 8 and "timings" in events[-1]
    whole = requests.post(server.url + "/infill", json={**body, "stream": False}, timeout=60).json()
    assert "".join(e["content"] for e in events) == whole["content"]
    assert whole["timings"]["cache_n"] >= whole["tokens_evaluated"] - 1      # the same prompt again: reused


def test_response_fields_and_a_warm_up_of_n_predict_0(server):
    """llama.vscode warms its context chunks with n_predict 0 and asks for some fields by their path."""
    warm = {"input_prefix": "class Cache:\n", "input_suffix": "", "n_predict": 0,
            "input_extra": [{"filename": "c.py", "text": "import json\n" * 20}]}
    fields = ["content", "timings/prompt_n", "timings/cache_n", "truncated", "tokens_cached", "nothing/here"]
    a = requests.post(server.url + "/infill", json={**warm, "response_fields": fields}, timeout=60).json()
    assert set(a) == {"content", "timings/prompt_n", "timings/cache_n", "truncated", "tokens_cached"}
    assert a["content"] == "" and a["truncated"] is False
    again = requests.post(server.url + "/infill", json={**warm, "input_prefix": "class Cache:\n    def",
                                                        "n_predict": 2}, timeout=60).json()
    # the chunks' tokens were kept: all the two prompts share, the warm-up's but its last three ("\n", FIM_SUF,
    # FIM_MID: the new prefix's "\n    " is one token). Was - 2, met only where an earlier test's request had run
    # first (the module's server warm); on a fresh server (the test alone) the reuse is the shared prefix, 3 short
    assert again["timings"]["cache_n"] >= a["timings/prompt_n"] - 3


def test_the_openai_sdks_suffix_is_laid_out_prefix_suffix_middle(server):
    import openai

    oai = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    c = oai.completions.create(model="coder", prompt="def area(r):\n    return ", suffix="\n\nprint(area(2))\n",
                               max_tokens=4, temperature=0)
    expected = laid_out(server, prefix="def area(r):\n    return ", suffix="\n\nprint(area(2))\n", n_predict=4)
    assert expected[:1] == [REP] and expected[-1] == MID
    assert c.usage.prompt_tokens == len(expected) and holds(server, expected)
    stream = oai.completions.create(model="coder", prompt="def area(r):\n    return ", suffix="\n\nprint(area(2))\n",
                                    max_tokens=4, temperature=0, stream=True)
    assert "".join(ch.choices[0].text for ch in stream) == c.choices[0].text


def test_the_fim_file_separator_ends_the_answer(scripted):
    a = requests.post(scripted.url + "/infill", json={**BODY, "temperature": 0}, timeout=60).json()
    assert a["content"] == "def\n    self\n self" and a["stop_type"] == "eos" and a["tokens_predicted"] == 5
    c = requests.post(scripted.url + "/v1/completions", json={"prompt": "def f(x):\n", "suffix": "\n",
                                                              "max_tokens": 50, "temperature": 0}, timeout=60).json()
    assert c["choices"][0]["text"] == "def\n    self\n self" and c["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize("n_indent, content", [(4, "def\n    self\n"), (1, "def\n    self\n self"),
                                               (5, "def\n")])
def test_n_indent_ends_the_answer_at_a_line_less_indented(scripted, n_indent, content):
    a = requests.post(scripted.url + "/infill", json={**BODY, "temperature": 0, "n_indent": n_indent},
                      timeout=60).json()
    assert a["content"] == content
    assert a["stop_type"] == ("eos" if n_indent == 1 else "limit")


def test_an_editor_that_gives_up_cancels_its_completion(server):
    """The next keystroke: llama.vscode aborts the request; the job is cancelled (it was never run here: the
    worker is held until the server has seen the client go)."""
    sched = server.state.scheduler
    held, release = threading.Event(), threading.Event()
    sched.call(lambda: (held.set(), release.wait(30)))
    assert held.wait(10)
    before = len(sched.requests)
    try:
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.post(server.url + "/infill", json={**BODY, "n_predict": 64}, timeout=0.5)
        time.sleep(0.6)                          # the handler looks at its client every 0.25 s
    finally:
        release.set()
    deadline = time.monotonic() + 30
    while len(sched.requests) == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sched.requests[-1]["api"] == "infill" and sched.requests[-1]["status"] == "cancelled"
    assert sched.metrics.requests_by_api["infill"] >= 1 and sched.metrics.requests_total["cancelled"] >= 1


def test_a_model_without_fim_tokens_gets_a_400_that_names_it(tiny_server):
    r = requests.post(tiny_server.url + "/infill", json=BODY, timeout=30)
    assert r.status_code == 400
    err = r.json()["error"]
    assert "has no fill-in-the-middle tokens" in err["message"] and tiny_server.state.model_name in err["message"]
    r = requests.post(tiny_server.url + "/v1/completions", json={"prompt": "a", "suffix": "b"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix"
    assert "fill-in-the-middle" in r.json()["error"]["message"]
    plain = requests.post(tiny_server.url + "/v1/completions", json={"prompt": "a", "suffix": "", "max_tokens": 1},
                          timeout=30)
    assert plain.status_code == 200          # an empty suffix is no suffix there


@pytest.mark.parametrize("body, param", [
    ({"input_suffix": ""}, "input_prefix"),
    ({"input_prefix": ""}, "input_suffix"),
    ({"input_prefix": 3, "input_suffix": ""}, "input_prefix"),
    ({**BODY, "prompt": ["y"]}, "prompt"),
    ({**BODY, "input_extra": {"filename": "a", "text": "b"}}, "input_extra"),
    ({**BODY, "input_extra": [{"filename": "a"}]}, "input_extra[0].text"),
    ({**BODY, "input_extra": [{"filename": 1, "text": "b"}]}, "input_extra[0].filename"),
    ({**BODY, "input_extra": ["text"]}, "input_extra[0]"),
    ({**BODY, "n_predict": -2}, "n_predict"),
    ({**BODY, "n_indent": -1}, "n_indent"),
    ({**BODY, "t_max_predict_ms": "x"}, "t_max_predict_ms"),
    ({**BODY, "temperature": "hot"}, "temperature"),
    ({**BODY, "response_fields": "content"}, "response_fields"),
    ({**BODY, "stop": 5}, "stop"),
])
def test_bad_bodies_get_400_naming_the_field(server, body, param):
    r = requests.post(server.url + "/infill", json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_bad_completions_suffix_bodies(server):
    for body, param in [({"prompt": [1, 2], "suffix": "b"}, "prompt"), ({"prompt": "a", "suffix": 5}, "suffix")]:
        r = requests.post(server.url + "/v1/completions", json=body, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    r = requests.post(server.url + "/infill", data=b"{not json", timeout=30)
    assert r.status_code == 400
