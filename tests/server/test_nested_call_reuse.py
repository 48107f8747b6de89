"""A call's nested object whose keys are all optional opens as the tokenizer writes it (the default model,
the real anthropic SDK streaming, as an agent runs it). Claude Code's Task tool has such an object
(`options`, and `limits` in it): ` {` is forced there and the key or `}` after it is the model's choice, so
no split could be planned and the model wrote ` {` `"`; the next turn renders the call back as ` {"` and read
the rest of the call again: 39 tokens every turn after a Task call in a multi-agent trial."""

from __future__ import annotations

import anthropic
import pytest

from tests.server.live import LiveServer
from tests.server.test_call_history_reuse import after_the_calls, held_after

LIMITS = {"type": "object", "properties": {"max_turns": {"type": "integer"}, "max_tokens": {"type": "integer"}}}
TOOLS = [{"name": "Task", "description": "Start a subagent on a task.", "input_schema": {
    "type": "object", "properties": {
        "prompt": {"type": "string", "maxLength": 40},
        "options": {"type": "object", "properties": {"model": {"type": "string", "enum": ["sonnet", "haiku"]},
                                                     "limits": LIMITS}}},
    "required": ["prompt", "options"]}}]


@pytest.fixture(scope="module")
def server(default_model_path):
    with LiveServer(model=str(default_model_path), ctx=2048, batch=2, threads=2, conversation_cache_mib=64) as s:
        yield s


def test_a_nested_object_opens_as_the_tokenizer_writes_it_and_the_next_turn_reads_only_what_is_new(server):
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)
    tok = server.state.engine.tokenizer
    lone = tok.encode(" {", add_bos=False)
    assert len(lone) == 1
    nested = whole = 0
    for seed in range(8):
        ask = [{"role": "user", "content": f"Start a subagent with limits to fix test {seed}."}]
        with client.messages.stream(model="m", system="You are a coding agent.", messages=ask, tools=TOOLS,
                                    max_tokens=120, tool_choice={"type": "tool", "name": "Task"},
                                    extra_body={"seed": 10 * seed, "temperature": 1.0}) as s:
            first = s.get_final_message()
        assert first.stop_reason == "tool_use", seed
        held, prompt = held_after(server, first)
        answer = list(held[prompt:])
        text = tok.decode(answer)
        nested += text.count(': {') - 1                    # the arguments' own opening is not nested
        # never ` {` alone before a key's quote or the object's end: the tokenizer writes ` {"` / ` {}`
        for i, t in enumerate(answer[:-1]):
            assert not (t == lone[0] and tok.token_bytes(answer[i + 1])[:1] in (b'"', b"}")), (seed, text)
        canonical = tok.encode(text, add_bos=False)
        second = after_the_calls(client, ask, first, TOOLS, "done", seed)
        if answer == canonical[:len(answer)]:       # the whole call in the tokenizer's split: none read again
            assert second.usage.cache_read_input_tokens == len(held), seed
            whole += 1
    assert nested >= 8 and whole >= 4, (nested, whole)
