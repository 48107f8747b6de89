"""GLM's real chat templates (llama.cpp's models/templates GLM-4.6.jinja and GLM-4.7-Flash.jinja, copied to
tests/fixtures/) rendered by our sandbox with agent histories: system, user, a turn of reasoning, text and
several calls (arguments as the OpenAI wire's JSON strings and as objects), their results, more turns.

The conversation cache needs the same history to render to the same tokens: the answer the model wrote,
read by the shared reader (split_answer) and sent back as each API sends it, must render back exactly as
written (then the `<|observation|>` the model ends a calling turn with)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from strata.engine.chat_template import ChatTemplate, ChatTemplateError
from strata.server.prompting import AnswerFormat, split_answer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GLM46, GLM47 = "GLM-4.6.jinja", "GLM-4.7-Flash.jinja"

PARAMS = {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"},
                                           "env": {"type": "object"}}, "required": ["command"]}
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command", "parameters": PARAMS}}]
START = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is here?"}]


def template(name: str) -> ChatTemplate:
    return ChatTemplate((FIXTURES / name).read_text(encoding="utf-8"), "[gMASK]", "<|endoftext|>")


def history() -> list[dict]:
    return START + [
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "Need ls.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash",
                                                              "arguments": '{"command": "ls", "timeout": 30}'}},
            {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": {"command": "pwd"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
        {"role": "tool", "tool_call_id": "call_2", "content": "/w"}]


def test_glm46_renders_an_agent_history():
    text = template(GLM46).render(history(), tools=TOOLS)
    assert text.startswith("[gMASK]<sop><|system|>\n# Tools\n")
    assert json.dumps(TOOLS[0], ensure_ascii=False) in text
    assert text.endswith(
        "<|system|>\nBe brief.<|user|>\nWhat is here?<|assistant|>\n<think>Need ls.</think>\nLet me look.\n"
        "<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>\n<arg_key>timeout</arg_key>\n"
        "<arg_value>30</arg_value>\n</tool_call>\n<tool_call>bash\n<arg_key>command</arg_key>\n"
        "<arg_value>pwd</arg_value>\n</tool_call><|observation|>\n<tool_response>\na.py\n</tool_response>\n"
        "<tool_response>\n/w\n</tool_response><|assistant|>")


def test_glm47_renders_an_agent_history_and_opens_thinking():
    text = template(GLM47).render(history(), tools=TOOLS)
    assert text.endswith(
        "<|system|>Be brief.<|user|>What is here?<|assistant|><think>Need ls.</think>Let me look."
        "<tool_call>bash<arg_key>command</arg_key><arg_value>ls</arg_value><arg_key>timeout</arg_key>"
        "<arg_value>30</arg_value></tool_call><tool_call>bash<arg_key>command</arg_key><arg_value>pwd</arg_value>"
        "</tool_call><|observation|><tool_response>a.py</tool_response><tool_response>/w</tool_response>"
        "<|assistant|><think>")


def test_reasoning_of_turns_before_the_last_user_message_is_dropped():
    """As the templates do (llama.cpp too): an earlier round's reasoning becomes an empty block."""
    msgs = history() + [{"role": "assistant", "content": "Two files."}, {"role": "user", "content": "Thanks"}]
    assert "<|assistant|>\n<think></think>\nLet me look." in template(GLM46).render(msgs, tools=TOOLS)
    assert "<|assistant|></think>Let me look." in template(GLM47).render(msgs, tools=TOOLS)


def test_thinking_off_is_rendered_as_llama_cpp_expects():
    """enable_thinking=False: GLM-4.6 appends /nothink to user messages and closes an empty block in the
    generation prompt; GLM-4.7 closes the block it would open."""
    g46 = template(GLM46).render(START, enable_thinking=False)
    assert g46.endswith("<|user|>\nWhat is here?/nothink<|assistant|>\n<think></think>")
    assert template(GLM47).render(START, enable_thinking=False).endswith("<|assistant|></think>")
    assert template(GLM46).render(START).endswith("What is here?<|assistant|>")


def test_arguments_that_are_not_an_object_are_named():
    msgs = START + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "bash", "arguments": "ls -la"}}]}]
    for name in (GLM46, GLM47):
        with pytest.raises(ChatTemplateError, match=r"the earlier call of 'bash' \(id 'call_9'\).*JSON object"):
            template(name).render(msgs, tools=TOOLS)


# what each model writes after its generation prompt (GLM-4.7's prompt ends with "<think>")
ANSWERS = {
    GLM46: [
        "\n<think>Need ls.</think>\nLet me look.\n<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>"
        "\n<arg_key>timeout</arg_key>\n<arg_value>30</arg_value>\n</tool_call>\n<tool_call>bash\n<arg_key>command"
        "</arg_key>\n<arg_value>pwd</arg_value>\n</tool_call>",
        "\n<think></think>\n<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>cat <<EOF\n<a> & {\"b\": 1}\nEOF"
        "</arg_value>\n<arg_key>env</arg_key>\n<arg_value>{\"A\": \"1\"}</arg_value>\n</tool_call>",
    ],
    GLM47: [
        "Need ls.</think>Let me look.<tool_call>bash<arg_key>command</arg_key><arg_value>ls</arg_value>"
        "<arg_key>timeout</arg_key><arg_value>30</arg_value></tool_call><tool_call>bash<arg_key>command</arg_key>"
        "<arg_value>pwd</arg_value></tool_call>",
        "Quick.</think><tool_call>bash<arg_key>command</arg_key><arg_value>echo '<x>'\n</arg_value></tool_call>",
    ],
}


@pytest.mark.parametrize(("name", "answer"), [(n, a) for n, answers in ANSWERS.items() for a in answers])
def test_the_answer_renders_back_as_the_model_wrote_it(name, answer):
    t = template(name)
    prompt = t.render(START, tools=TOOLS)
    reasoning, content, calls = split_answer(answer, AnswerFormat(opened=prompt.endswith("<think>"), glm_calls=True), TOOLS)
    assert calls
    turn = {"role": "assistant", "content": content, "reasoning_content": reasoning,
            "tool_calls": [{"id": f"call_{k}", "type": "function", "function": c} for k, c in enumerate(calls)]}
    results = [{"role": "tool", "tool_call_id": f"call_{k}", "content": "ok"} for k in range(len(calls))]
    again = t.render(START + [turn] + results, tools=TOOLS)
    assert again.startswith(prompt + answer + "<|observation|>")
