"""Seed-OSS's real chat template (llama.cpp's models/templates/ByteDance-Seed-OSS.jinja, copied to
tests/fixtures/) rendered by our sandbox with an agent history: system, tools (its Python-style signatures),
user, a turn of reasoning, text and two calls (arguments as the OpenAI wire's JSON strings and as objects),
their results; thinking_budget 0 (a chat_template_kwargs variable) closing the reasoning in the prompt.

The conversation cache needs the same history to render to the same tokens: the answer the model wrote, read
by the shared reader (split_answer with Seed-OSS's tags and calls) and sent back, must render back exactly as
written, then the `<seed:eos>` the model ends its turn with."""

from __future__ import annotations

from pathlib import Path

import pytest
from strata.engine.chat_template import ChatTemplate
from strata.server.prompting import AnswerFormat, split_answer
from strata.server.reasoning import SEED_TAGS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PARAMS = {"type": "object", "properties": {"command": {"type": "string", "description": "the command"},
                                           "timeout": {"type": "integer"}}, "required": ["command"]}
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command", "parameters": PARAMS}}]
START = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is here?"}]
SEED = AnswerFormat(think=SEED_TAGS, seed_calls=True)


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    return ChatTemplate((FIXTURES / "ByteDance-Seed-OSS.jinja").read_text(encoding="utf-8"), "<seed:bos>",
                        "<seed:eos>")


def test_renders_an_agent_history(template):
    msgs = START + [
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "Need ls.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls", "timeout": 30}'}},
            {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": {"command": "pwd"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "tool", "tool_call_id": "c2", "content": "/w"}]
    text = template.render(msgs, tools=TOOLS)
    assert text.startswith("<seed:bos>system\nBe brief.\n\nFunction:\ndef bash(command: str,timeout: int):")
    assert "- command (str) [必填]: the command" in text
    assert text.endswith(
        "<seed:bos>user\nWhat is here?<seed:eos>"
        "<seed:bos>assistant\n<seed:think>Need ls.</seed:think>\nLet me look.\n\n"
        "<seed:tool_call>\n<function=bash>\n<parameter=command>ls</parameter>\n<parameter=timeout>30</parameter>\n"
        "</function>\n</seed:tool_call>\n<seed:tool_call>\n<function=bash>\n<parameter=command>pwd</parameter>\n"
        "</function>\n</seed:tool_call><seed:eos>"
        "<seed:bos>tool\na.py<seed:eos><seed:bos>tool\n/w<seed:eos><seed:bos>assistant\n")


def test_thinking_budget_zero_closes_the_reasoning_in_the_prompt(template):
    text = template.render(START, tools=TOOLS, thinking_budget=0)
    assert text.endswith("<seed:bos>assistant\n<seed:think>\n<seed:cot_budget_reflect>The current thinking budget "
                         "is 0, so I will directly start answering the question.</seed:cot_budget_reflect>\n"
                         "</seed:think>")
    assert split_answer("Hello.", SEED, TOOLS) == (None, "Hello.", [])


# what the model writes after its generation prompt "<seed:bos>assistant\n"
ANSWERS = [
    "<seed:think>Need ls.</seed:think>\nLet me look.\n\n<seed:tool_call>\n<function=bash>\n"
    "<parameter=command>ls</parameter>\n<parameter=timeout>30</parameter>\n</function>\n</seed:tool_call>\n"
    "<seed:tool_call>\n<function=bash>\n<parameter=command>pwd</parameter>\n</function>\n</seed:tool_call>",
    "<seed:think>Quick.</seed:think>\n<seed:tool_call>\n<function=bash>\n<parameter=command>cat <<EOF\n<a> & b\n"
    "EOF</parameter>\n</function>\n</seed:tool_call>",
]


@pytest.mark.parametrize("answer", ANSWERS)
def test_the_answer_renders_back_as_the_model_wrote_it(template, answer):
    prompt = template.render(START, tools=TOOLS)
    reasoning, content, calls = split_answer(answer, SEED, TOOLS)
    assert calls
    turn = {"role": "assistant", "content": content, "reasoning_content": reasoning,
            "tool_calls": [{"id": f"call_{k}", "type": "function", "function": c} for k, c in enumerate(calls)]}
    results = [{"role": "tool", "tool_call_id": f"call_{k}", "content": "ok"} for k in range(len(calls))]
    again = template.render(START + [turn] + results, tools=TOOLS)
    assert again.startswith(prompt + answer + "<seed:eos>")


def test_a_plain_answer_renders_back(template):
    prompt = template.render(START)
    answer = "<seed:think>Simple.</seed:think>\nNothing but a.py."
    reasoning, content, _ = split_answer(answer, SEED, None)
    again = template.render(START + [{"role": "assistant", "content": content, "reasoning_content": reasoning},
                                     {"role": "user", "content": "ok"}])
    assert again.startswith(prompt + answer + "<seed:eos>")
