"""The next turn after a tool call reuses the call as the context holds it (the default model, the real
anthropic SDK streaming, as an agent runs it). A live trial saw every turn after a call read 15-18 tokens
again: the call's arguments open with ` {"` (one token of SmolLM2's), forced by the held call while the
key after it was the model's choice (two parameters), and the model, free to split ` {"` as it liked,
often wrote ` {` `"`; the next turn renders the call back and the tokenizer reads ` {"` there, so the
history differed from that token to the call's end (17 of 30 sampled calls, 16-27 tokens each, before
canonical_split planned that piece). A split the model chose inside its own free text (a path's letters)
still differs from the tokenizer's, but since session 35 the next turn, sent as text, takes the context's own
tokens for those bytes as it arrives (byte_align.py), so it is not read again either: docs/internals.md."""

from __future__ import annotations

import anthropic
import pytest

from tests.server.live import LiveServer

TOOLS = [{"name": "run_shell", "description": "Run a shell command", "input_schema": {
             "type": "object", "properties": {"command": {"type": "string", "maxLength": 60}}, "required": ["command"]}},
         {"name": "read_file", "description": "Read a file", "input_schema": {
             "type": "object", "properties": {"path": {"type": "string", "maxLength": 60}, "limit": {"type": "integer"}},
             "required": ["path"]}}]


@pytest.fixture(scope="module")
def server(default_model_path):
    with LiveServer(model=str(default_model_path), ctx=2048, batch=2, threads=2, conversation_cache_mib=64) as s:
        yield s


def held_after(server, first) -> tuple[list[int], int]:
    """The tokens of the context that holds `first` (the prompt and the answer as generated) and the prompt's
    length."""
    prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    held = next(list(c.tokens) for c in server.state.scheduler.table.contexts
                if len(c.tokens) >= prompt + first.usage.output_tokens - 1)
    return held, prompt


def after_the_calls(client, ask: list[dict], first, tools: list[dict], result: str, seed: int):
    """The next turn: `first`'s calls each answered with `result`, four tokens asked (its usage is the point)."""
    uses = [b for b in first.content if b.type == "tool_use"]
    turn2 = ask + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": result}
                                                for b in uses]}]
    with client.messages.stream(model="m", system="You are a coding agent.", messages=turn2, tools=tools,
                                max_tokens=4, extra_body={"seed": 10 * seed + 1}) as s:
        return s.get_final_message()


def test_the_arguments_open_as_the_tokenizer_writes_them_and_the_next_turn_reads_only_what_is_new(server):
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)
    tok = server.state.engine.tokenizer
    opening = tok.encode('arguments": {"', add_bos=False)     # 'arguments' '":' ' {"'
    whole = 0
    for seed in range(8):
        ask = [{"role": "user", "content": f"List the files in the repository {seed}, then read README.md."}]
        with client.messages.stream(model="m", system="You are a coding agent.", messages=ask, tools=TOOLS,
                                    max_tokens=200, tool_choice={"type": "any"}, extra_body={"seed": 10 * seed}) as s:
            first = s.get_final_message()
        assert first.stop_reason == "tool_use", seed
        held, prompt = held_after(server, first)
        answer = list(held[prompt:])
        at = next(i for i in range(len(answer)) if answer[i:i + 2] == opening[:2])
        canonical = tok.encode(tok.decode(answer), add_bos=False)
        # the call as the tokenizer writes it, through its first key's opening quote (` {"`, not ` {` `"`)
        assert answer[at:at + 3] == opening, (seed, tok.decode(answer))
        assert answer[:at + 3] == canonical[:at + 3], (seed, tok.decode(answer))
        second = after_the_calls(client, ask, first, TOOLS, "a.py", seed)
        if answer == canonical[:len(answer)]:       # the whole call in the tokenizer's split: none read again
            assert second.usage.cache_read_input_tokens == len(held), seed
            whole += 1
    assert whole >= 4
