"""Every answer object and stream event, checked by the installed SDKs' own pydantic models in strict mode,
on a live server whose tiny model reasons, writes text, then calls a tool: chat completions (whole, every
chunk, the usage chunk), Anthropic messages (whole, every event but `ping`, in Anthropic's order), ids'
prefixes, and the stop reasons the SDKs know (`tool_use`, `max_tokens`, `stop_sequence` with the sequence;
never `pause_turn` or `refusal`, which only Anthropic's servers give)."""

from __future__ import annotations

import json
import urllib.request

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import TypeAdapter

from tests.server.live import LiveServer

SCRIPT = ("<think>", "Plan it", "</think>", "Checking.", "<tool_call>", '\n{"name": "get_time", "arguments": {}}\n',
          "</tool_call>")
TOOLS = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
A_TOOLS = [{"name": "get_time", "input_schema": {"type": "object", "properties": {}}}]
ASK = [{"role": "user", "content": "Time?"}]
EVENTS = TypeAdapter(RawMessageStreamEvent)


@pytest.fixture(scope="module")
def url(tiny_model_factory):
    shape = dict(ctx_len=2048, n_vocab=512, seed=3, added_tokens=SCRIPT)
    ids = (13, *range(512, 512 + len(SCRIPT)), 2)    # after the prompt's last "\n": the added tokens, <|im_end|>
    with LiveServer(model=str(tiny_model_factory(**shape, script=ids)), ctx=2048, batch=2, threads=1,
                    conversation_cache_mib=0) as s:
        yield s.url


def post(url: str, path: str, body: dict) -> str:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read().decode()


def sse(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ") and line != "data: [DONE]"]


def test_chat_objects_and_chunks_pass_the_sdks_strict_models(url):
    body = {"model": "m", "messages": ASK, "tools": TOOLS, "max_tokens": 60, "temperature": 0}
    r = ChatCompletion.model_validate(json.loads(post(url, "/v1/chat/completions", body)), strict=True)
    assert r.id.startswith("chatcmpl-") and r.choices[0].finish_reason == "tool_calls"
    assert r.choices[0].message.tool_calls[0].id.startswith("call_")
    assert (r.choices[0].message.reasoning_content, r.choices[0].message.content) == ("Plan it", "Checking.")
    chunks = [ChatCompletionChunk.model_validate(c, strict=True) for c in sse(post(
        url, "/v1/chat/completions", {**body, "stream": True, "stream_options": {"include_usage": True}}))]
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].id.startswith("chatcmpl-")
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    cut = ChatCompletion.model_validate(json.loads(post(url, "/v1/chat/completions", {**body, "max_tokens": 2})),
                                        strict=True)
    assert cut.choices[0].finish_reason == "length"


@pytest.mark.parametrize("extra, reason, sequence", [({}, "tool_use", None), ({"max_tokens": 3}, "max_tokens", None),
                                                     ({"stop_sequences": ["ecking"]}, "stop_sequence", "ecking")])
def test_anthropic_messages_and_events_pass_the_sdks_strict_models(url, extra, reason, sequence):
    body = {"model": "m", "messages": ASK, "tools": A_TOOLS, "max_tokens": 60, "temperature": 0, **extra}
    m = Message.model_validate(json.loads(post(url, "/v1/messages", body)), strict=True)
    assert m.id.startswith("msg_") and (m.stop_reason, m.stop_sequence) == (reason, sequence)
    assert all(b.id.startswith("toolu_") for b in m.content if b.type == "tool_use")
    assert m.content[0].type == "thinking"
    events = [e for e in sse(post(url, "/v1/messages", {**body, "stream": True})) if e["type"] != "ping"]
    parsed = [EVENTS.validate_python(e, strict=True) for e in events]
    kinds = [e.type for e in parsed]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    blocks = kinds[1:-2]              # per block: start, deltas, stop, with its index
    starts = [i for i, k in enumerate(blocks) if k == "content_block_start"]
    for n, at in enumerate(starts):
        end = blocks.index("content_block_stop", at)
        assert set(blocks[at + 1:end]) <= {"content_block_delta"}
        assert {parsed[1 + i].index for i in range(at, end + 1)} == {n}
    assert len(starts) == len(m.content) and blocks.count("content_block_stop") == len(starts)
    assert (parsed[-2].delta.stop_reason, parsed[-2].delta.stop_sequence) == (reason, sequence)
