"""A model whose chat template does not parse: the server still loads it and says so once at start-up
(one WARNING naming the problem); the chat endpoints (OpenAI chat, Anthropic messages, Responses) answer
with an error that says the template is unusable, while /v1/completions keeps working. Before session 20
the template was parsed with the tokenizer, so the load failed ('the model could not be loaded: chat
template does not parse') and nothing was served, text completion included. Real server on loopback,
real SDKs, a tiny model carrying the broken template."""

from __future__ import annotations

import logging

import anthropic
import openai
import pytest
from strata.engine import Engine

from tests.server.live import LiveServer

BROKEN = "{% for message in messages %}{{ message['content'] }{% endfor %}"   # '}' where '}}' belongs
PROBLEM = "chat template does not parse"


@pytest.fixture(scope="module")
def broken_model(tiny_model_factory):
    return tiny_model_factory(ctx_len=2048, n_vocab=512, seed=3, chat_template=BROKEN)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def server(broken_model, tmp_path_factory):
    records = Records()
    logging.getLogger("strata").addHandler(records)
    try:
        srv = LiveServer(model=str(broken_model), ctx=2048, batch=2, slot_ctx=1024, threads=1,
                         conversation_cache_cold_dir=str(tmp_path_factory.mktemp("cache")),
                         conversation_cache_mib=64).start()
    finally:
        logging.getLogger("strata").removeHandler(records)
    srv.startup_warnings = records.lines
    yield srv
    srv.stop()


def test_the_engine_loads_and_names_the_problem(broken_model):
    engine = Engine(str(broken_model), n_ctx=256, n_threads=1)
    assert PROBLEM in engine.chat_template_problem and "line 1" in engine.chat_template_problem
    assert engine.tokenize("hello world")          # the tokenizer does not depend on the template
    with pytest.raises(ValueError, match="chat template is unusable"):
        engine.apply_chat_template([{"role": "user", "content": "hi"}])


def test_one_warning_at_start_up_names_the_problem(server):
    about = [w for w in server.startup_warnings if "chat template" in w]
    assert len(about) == 1, server.startup_warnings
    assert PROBLEM in about[0] and "/v1/completions works" in about[0]


def test_chat_endpoints_say_the_template_is_unusable(server):
    oai = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60)
    calls = {
        "chat": lambda: oai.chat.completions.create(model="m", max_tokens=4,
                                                    messages=[{"role": "user", "content": "hi"}]),
        "chat stream": lambda: list(oai.chat.completions.create(model="m", max_tokens=4, stream=True,
                                                                messages=[{"role": "user", "content": "hi"}])),
        "responses": lambda: oai.responses.create(model="m", max_output_tokens=16, input="hi"),
        "messages": lambda: claude.messages.create(model="m", max_tokens=4,
                                                   messages=[{"role": "user", "content": "hi"}]),
        "messages stream": lambda: list(claude.messages.create(model="m", max_tokens=4, stream=True,
                                                               messages=[{"role": "user", "content": "hi"}])),
    }
    for name, call in calls.items():
        with pytest.raises((openai.APIStatusError, anthropic.APIStatusError)) as err:
            call()
        assert err.value.status_code == 500, name
        assert "chat template is unusable" in str(err.value) and PROBLEM in str(err.value), (name, str(err.value))
        assert "/v1/completions" in str(err.value), name


def test_text_completion_still_works(server):
    oai = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    out = oai.completions.create(model="m", prompt="hello", max_tokens=3, temperature=0)
    assert out.choices[0].finish_reason == "length" and out.usage.completion_tokens == 3
