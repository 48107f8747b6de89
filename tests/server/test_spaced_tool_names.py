"""A tool whose name has a space ("a b": OpenAI refuses it, llama.cpp and agents in the wild send it) is
offered as it is, and a call to it comes back as a call named "a b" in every call format read here,
whole and streamed; a tool message without `tool_call_id` is accepted too. Before, Mistral's and GLM's
readers left such a call in the text and gpt-oss's read it as a call of "a"."""

from __future__ import annotations

import json

import pytest
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

from tests.server.live import LiveServer, sdk_clients

NAME = "a b"
TOOLS = [{"type": "function", "function": {"name": NAME, "parameters": {
    "type": "object", "properties": {"x": {"type": "integer"}}}}}]
CALL = ("a b", {"x": 1})

# each format's answer calling "a b" with {"x": 1}
ANSWERS = {
    "hermes": (AnswerFormat(), '<tool_call>\n{"name": "a b", "arguments": {"x": 1}}\n</tool_call>'),
    "qwen3-coder": (AnswerFormat(), "<tool_call>\n<function=a b>\n<parameter=x>\n1\n</parameter>\n</function>\n"
                                    "</tool_call>"),
    "mistral": (AnswerFormat(mistral_calls=True), '[TOOL_CALLS]a b[ARGS]{"x": 1}'),
    "mistral-3.2": (AnswerFormat(mistral_calls=True), '[TOOL_CALLS]a b[CALL_ID]abcDEF123[ARGS]{"x": 1}'),
    "glm-4.5": (AnswerFormat(glm_calls=True), "<tool_call>a b\n<arg_key>x</arg_key>\n<arg_value>1</arg_value>\n"
                                             "</tool_call>"),
    "glm-4.7": (AnswerFormat(glm_calls=True), "<tool_call>a b<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>"),
    "seed": (AnswerFormat(seed_calls=True), "<seed:tool_call><function=a b><parameter=x>1</parameter></function>"
                                           "</seed:tool_call>"),
    "harmony": (AnswerFormat(harmony=True), '<|channel|>commentary to=functions.a b <|constrain|>json<|message|>'
                                            '{"x": 1}<|call|>'),
    "harmony-header-first": (AnswerFormat(harmony=True), '<|start|>assistant to=functions.a b<|channel|>commentary '
                                                         'json<|message|>{"x": 1}<|call|>'),
    "harmony-json-after": (AnswerFormat(harmony=True), '<|channel|>commentary to=functions.a b json<|message|>'
                                                       '{"x": 1}<|call|>'),
}


def named(calls) -> list[tuple[str, dict]]:
    return [(c["name"], json.loads(c["arguments"])) for c in calls]


@pytest.mark.parametrize("form", list(ANSWERS))
def test_a_call_of_a_spaced_name_reads_back_in_every_format(form):
    fmt, text = ANSWERS[form]
    _, content, calls = split_answer(text, fmt, TOOLS)
    assert (content, named(calls)) == ("", [CALL])
    stream = AnswerStream(fmt, TOOLS)
    sent = [p for i in range(0, len(text), 3) for p in stream.feed(text[i:i + 3])]   # a few characters a piece
    pieces, rest, calls = stream.finish(text)
    assert "".join(t for _, t in sent + pieces) + rest == "" and named(calls) == [CALL]


@pytest.mark.parametrize("form", ["mistral", "glm-4.7"])
def test_a_spaced_name_no_tool_has_is_still_text(form):
    """Only an offered name may hold a space: prose between the markers is not read as a call."""
    fmt, text = ANSWERS[form]
    prose = text.replace("a b", "some words")
    _, content, calls = split_answer(prose, fmt, TOOLS)
    assert calls == [] and "some words" in content


SCRIPT = ("Checking.", "<tool_call>", '\n{"name": "a b", "arguments": {"x": 1}}\n', "</tool_call>")


@pytest.fixture(scope="module")
def server(tiny_model_factory):
    """A tiny ChatML model that always answers "Checking." and a call of "a b"."""
    shape = dict(ctx_len=2048, n_vocab=512, seed=3, added_tokens=SCRIPT)
    ids = (13, *range(512, 512 + len(SCRIPT)), 2)    # after the prompt's last "\n": the added tokens, <|im_end|>
    with LiveServer(model=str(tiny_model_factory(**shape, script=ids)), ctx=2048, batch=2, threads=1,
                    conversation_cache_mib=0) as s:
        yield s


def test_the_sdks_get_a_call_named_a_b_and_the_result_needs_no_id(server):
    oai, claude = sdk_clients(server)
    ask = [{"role": "user", "content": "Go"}]
    r = oai.chat.completions.create(model="m", messages=ask, tools=TOOLS, max_tokens=50, temperature=0)
    m = r.choices[0].message
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [CALL]
    assert r.choices[0].finish_reason == "tool_calls"
    deltas = [c.choices[0].delta for c in oai.chat.completions.create(
        model="m", messages=ask, tools=TOOLS, max_tokens=50, temperature=0, stream=True) if c.choices]
    assert [tc.function.name for d in deltas for tc in d.tool_calls or ()] == [NAME]
    a_tools = [{"name": NAME, "input_schema": TOOLS[0]["function"]["parameters"]}]
    msg = claude.messages.create(model="m", messages=ask, tools=a_tools, max_tokens=50, extra_body={"temperature": 0})
    assert [(b.name, b.input) for b in msg.content if b.type == "tool_use"] == [CALL]
    assert msg.stop_reason == "tool_use"
    # the result comes back without tool_call_id (OpenAI requires it; llama.cpp and agents do without)
    turn2 = [*ask, m.model_dump(exclude_none=True), {"role": "tool", "content": "3"}]
    again = oai.chat.completions.create(model="m", messages=turn2, tools=TOOLS, max_tokens=50, temperature=0)
    assert again.usage.prompt_tokens > r.usage.prompt_tokens and again.choices[0].message.tool_calls
