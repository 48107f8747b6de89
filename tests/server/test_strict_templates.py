"""Templates stricter than agents' histories: Gemma 1 / 2's raises on any system message, and both it
and Gemma 3's insist on user / model turns alternating. render_chat (server/prompting.py) renders an
agent's history in the shapes they take: the system prompt folded into the first user turn, tools and
calls as text (the template has no tool support), results and a reminder beside them in one user turn.
Rendered with a real engine on tiny models carrying those templates."""

from __future__ import annotations

import re

import pytest
from strata.engine import Engine
from strata.server.prompting import render_chat

# google/gemma-7b-it's template as llama.cpp's tests hold it (Gemma 2's is the same)
GEMMA1 = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
          "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
          "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}")
# Gemma 3's shape: the system prompt folded into the first user turn by the template itself, alternation
GEMMA3 = ("{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set prefix = messages[0]['content'] + '\\n\\n' %}"
          "{% set loop_messages = messages[1:] %}{% else %}{% set prefix = '' %}{% set loop_messages = messages %}"
          "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
          "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
          "{{ '<start_of_turn>' + role + '\\n' + (prefix if loop.first else '') + message['content'] | trim"
          " + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")

TOOLS = [{"type": "function", "function": {"name": "read", "description": "Read a file",
                                            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
CALLS = [{"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": f'{{"path": "{p}"}}'}}
         for i, p in enumerate(("a.py", "b.py"))]
AGENT = [{"role": "system", "content": "You are a coding agent."},
         {"role": "user", "content": "Fix the bug."},
         {"role": "assistant", "content": "", "tool_calls": CALLS},
         {"role": "tool", "tool_call_id": "c0", "content": "print(1)"},
         {"role": "tool", "tool_call_id": "c1", "content": "print(2)"},
         {"role": "user", "content": "<system-reminder>keep going</system-reminder>"}]


@pytest.fixture(scope="module", params=["gemma1", "gemma3"])
def engine(request, tiny_model_factory):
    return Engine(tiny_model_factory(chat_template=GEMMA1 if request.param == "gemma1" else GEMMA3), n_ctx=1024)


def roles(text: str) -> list[str]:
    return re.findall(r"<start_of_turn>(\w+)\n", text)


def test_a_system_prompt_reaches_the_first_user_turn(engine):
    text = engine.detokenize(render_chat(engine, AGENT[:2], None))
    assert roles(text) == ["user", "model"]
    assert "You are a coding agent.\n\nFix the bug." in text


def test_an_agent_history_renders_in_alternating_turns(engine):
    text = engine.detokenize(render_chat(engine, AGENT, TOOLS))
    assert roles(text) == ["user", "model", "user", "model"]
    assert '"name": "read"' in text and '"path": "a.py"' in text and '"path": "b.py"' in text   # tools, calls
    assert "print(1)" in text and "print(2)" in text and "keep going" in text                   # results, reminder


def test_the_next_turn_starts_with_this_one(engine):
    """The conversation cache reuses a turn's tokens only if the next turn's prompt starts with them."""
    first = engine.detokenize(render_chat(engine, AGENT[:2], TOOLS))
    second = engine.detokenize(render_chat(engine, AGENT[:3] + AGENT[3:5], TOOLS))
    assert second.startswith(first)


@pytest.mark.parametrize("template", ["HuggingFaceTB-SmolLM3-3B.jinja", "gpt_oss_template.jinja"])
def test_a_later_system_message_a_template_leaves_out_is_read_in_a_user_turn(template, tiny_model_factory):
    """SmolLM3's and gpt-oss's templates write only a leading system message and skip later ones without a
    word; Claude Code sends its environment as a system message after the first user turn. It is read as
    the user turn's text instead, and the next turn's prompt still begins with this one's."""
    from pathlib import Path

    source = (Path(__file__).parents[1] / "fixtures" / template).read_text()
    engine = Engine(str(tiny_model_factory(chat_template=source)), n_ctx=1024)
    turn1 = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "List files."},
             {"role": "system", "content": "Working directory: /tmp/work. Today is 2026-12-02."}]
    text1 = engine.detokenize(render_chat(engine, turn1, TOOLS))
    assert "You are a coding agent." in text1
    assert "List files.\n\nWorking directory: /tmp/work. Today is 2026-12-02." in text1
    turn2 = turn1 + [{"role": "assistant", "content": "a.py"}, {"role": "user", "content": "Open it."}]
    ids1, ids2 = render_chat(engine, turn1, TOOLS), render_chat(engine, turn2, TOOLS)
    shared = next((i for i, (a, b) in enumerate(zip(ids1, ids2, strict=False)) if a != b), len(ids1))
    assert "Today is 2026-12-02." in engine.detokenize(ids2[:shared])
