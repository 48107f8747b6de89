"""SmolLM3's chat template (llama.cpp's models/templates/HuggingFaceTB-SmolLM3-3B.jinja, Unsloth's edit, copied
to tests/fixtures/): ChatML with a `/think` or `/no_think` reasoning mode and no tools of its own. Rendered by our
sandbox it takes the tools-as-text path (render_tools_into_system: Hermes' `<tool_call>` JSON format in the
system prompt, earlier calls and results as text), and SmolLM3's answers, `<think>` reasoning then Hermes
calls, are read by the shared reader as for Qwen3 (no format of its own: llama.cpp's auto-parser finds only the
reasoning in this template)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from strata.engine.chat_template import ChatTemplate
from strata.server.prompting import PLAIN, split_answer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PARAMS = {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
          "required": ["command"]}
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command", "parameters": PARAMS}}]
START = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is here?"}]


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    return ChatTemplate((FIXTURES / "HuggingFaceTB-SmolLM3-3B.jinja").read_text(encoding="utf-8"), "",
                        "<|im_end|>")


def test_an_agent_history_renders_with_tools_and_calls_as_text(template):
    assert not template.supports_tools
    msgs = START + [
        {"role": "assistant", "content": "Let me look.", "reasoning_content": "Need ls.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]
    text = template.render(msgs, tools=TOOLS)
    assert text.startswith("<|im_start|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\n"
                           "Reasoning Mode: /think\n\n## Custom Instructions\n\nBe brief.\n\n# Tools\n")
    assert '"name": "bash", "description": "Run a command"' in text
    assert text.endswith(
        "<|im_start|>user\nWhat is here?<|im_end|>\n<|im_start|>assistant\nLet me look.\n<tool_call>\n"
        '{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\na.py\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_thinking_off_closes_the_reasoning_in_the_prompt(template):
    assert template.render(START, enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n")
    assert "Reasoning Mode: /no_think" in template.render([{"role": "system", "content": "Hi /no_think"}])


@pytest.mark.parametrize(("answer", "reasoning", "content"), [
    ("<think>\nNeed ls.\n</think>\nLet me look.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": "
     "{\"command\": \"ls\", \"timeout\": 30}}\n</tool_call>", "Need ls.", "Let me look."),
    ("<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\", \"timeout\": 30}}\n</tool_call>",
     None, ""),
])
def test_answers_are_read_as_hermes_calls(answer, reasoning, content):
    call = {"name": "bash", "arguments": json.dumps({"command": "ls", "timeout": 30})}
    assert split_answer(answer, PLAIN, TOOLS) == (reasoning, content, [call])
