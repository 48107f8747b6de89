"""A system message after the first user message (Claude Code's environment and date) on Mistral Small 3.2's
real template: the template takes it on the first turn (it counts it as the assistant's turn of its
alternation) and refuses the second turn's history, which renders in the strict shape (the message joined
to the user's text). The first turn is rendered in that shape too, so the second turn's prompt begins
with all of the first turn and its answer. Checked on the rendered tokens (a tiny model carrying the
template) and through the real `anthropic` and `openai` SDKs on a scripted tiny model."""

from __future__ import annotations

import pytest
from strata.engine import Engine
from strata.server.prompting import render_chat

from tests.server.live import LiveServer, sdk_clients
from tests.server.test_mistral_live import ADDED, SMALL32, TOOLS, WITH_ID, mistral_model

SYSTEM = {"role": "system", "content": "You are a coding agent."}
ASK = {"role": "user", "content": "show a.py"}
ENV = {"role": "system", "content": "<env>Working directory: /repo\nToday's date: 2026-12-02</env>"}
THEN = {"role": "user", "content": "and b.py?"}
CALL = [{"id": "abcDEF123", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=5, tokenizer_pre="tekken", added_tokens=ADDED,
                               chat_template=SMALL32)
    return Engine(str(model), n_ctx=4096, n_threads=1)


def test_the_second_turn_begins_with_the_first_and_its_answer(engine):
    answer = "Here it is."
    first = render_chat(engine, [SYSTEM, ASK, ENV], None)
    written = first + list(engine.tokenize(answer, special=True)) + [engine.tokenizer.eos_id]
    second = render_chat(engine, [SYSTEM, ASK, ENV, {"role": "assistant", "content": answer}, THEN], None)
    assert engine.detokenize(second).count(ENV["content"]) == 1       # the environment is read, once
    assert second[:len(written)] == written


def test_a_tool_loop_after_it_still_reuses_everything(engine):
    call = '[TOOL_CALLS]read_file[CALL_ID]abcDEF123[ARGS]{"path": "a.py"}'
    first = render_chat(engine, [SYSTEM, ASK, ENV], TOOLS)
    written = first + list(engine.tokenize(call, special=True)) + [engine.tokenizer.eos_id]
    second = render_chat(engine, [SYSTEM, ASK, ENV, {"role": "assistant", "content": "", "tool_calls": CALL},
                                  {"role": "tool", "tool_call_id": "abcDEF123", "content": "print(1)"}], TOOLS)
    assert second[:len(written)] == written


@pytest.fixture(scope="module")
def small32(tiny_model_factory):
    model = mistral_model(tiny_model_factory, SMALL32, WITH_ID)
    with LiveServer(model=str(model), ctx=4096, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


def test_claude_codes_environment_message_is_read_once(small32):
    _, claude = small32
    turn1 = [{"role": "user", "content": ASK["content"]}, {"role": "system", "content": ENV["content"]}]
    m1 = claude.messages.create(model="m", max_tokens=40, system=SYSTEM["content"], messages=turn1)
    assert m1.content[0].text.startswith("[TOOL_CALLS]read_file")      # no tools offered: the call is text
    turn2 = turn1 + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m1.content]},
                     {"role": "user", "content": THEN["content"]}]
    m2 = claude.messages.create(model="m", max_tokens=4, system=SYSTEM["content"], messages=turn2)
    assert m2.usage.cache_read_input_tokens == m1.usage.input_tokens + (m1.usage.cache_read_input_tokens or 0) + \
        m1.usage.output_tokens


def test_openai_chat_the_same(small32):
    oai, _ = small32
    r1 = oai.chat.completions.create(model="m", messages=[SYSTEM, ASK, ENV], max_tokens=40, temperature=0)
    turn2 = [SYSTEM, ASK, ENV, {"role": "assistant", "content": r1.choices[0].message.content}, THEN]
    r2 = oai.chat.completions.create(model="m", messages=turn2, max_tokens=4, temperature=0)
    assert r2.usage.prompt_tokens_details.cached_tokens == r1.usage.prompt_tokens + r1.usage.completion_tokens
