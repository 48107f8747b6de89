"""gpt-oss's Harmony answers read by the server (strata.engine.harmony, prompting.split_answer / AnswerStream):
analysis -> reasoning, final and recipient-less commentary -> text, a `to=functions.NAME` message -> a tool
call; streamed pieces (split anywhere) join to the same parts, and no markup ever reaches them. The answer
objects of the three APIs are built from such texts and checked with the SDKs' own models."""

from __future__ import annotations

import json

import anthropic.types
import openai.types.chat
import pytest
from openai.types.responses import Response
from strata.engine.harmony import HarmonyStream, is_harmony_vocabulary, parse_harmony
from strata.engine.tokenizer import Tokenizer
from strata.server.anthropic_api import message_response
from strata.server.errors import APIError
from strata.server.jobs import Completion
from strata.server.openai_api import chat_response
from strata.server.prompting import AnswerFormat, AnswerStream, answer_format, reasoning_effort, split_answer
from strata.server.responses_api import _Shape

from tests.fixtures.bpe_vocab import build_vocab

HARMONY = AnswerFormat(harmony=True)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]

ANALYSIS = "<|channel|>analysis<|message|>The user wants weather. Use the tool.<|end|>"
CALL_IN_CHANNEL = ("<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                   '<|message|>{"city":"Paris"}')
CALL_IN_ROLE = '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city":"Paris"}'
FINAL = "<|start|>assistant<|channel|>final<|message|>It is <b>sunny</b> in Paris."

# (answer text after the prompt's "<|start|>assistant", reasoning, content, calls)
CASES = {
    "analysis + final": (ANALYSIS + FINAL, "The user wants weather. Use the tool.",
                         "It is <b>sunny</b> in Paris.", []),
    "analysis + call in the channel header": (ANALYSIS + CALL_IN_CHANNEL, "The user wants weather. Use the tool.",
                                              "", [("get_weather", {"city": "Paris"})]),
    "analysis + call in the role header": (ANALYSIS + CALL_IN_ROLE, "The user wants weather. Use the tool.", "",
                                           [("get_weather", {"city": "Paris"})]),
    "call first, recipient before the channel": (' to=functions.get_weather<|channel|>commentary json<|message|>'
                                                 '{"city": "Oslo"}', None, "", [("get_weather", {"city": "Oslo"})]),
    "preamble then call": ("<|channel|>commentary<|message|>Checking the weather.<|end|>" + CALL_IN_CHANNEL,
                           None, "Checking the weather.", [("get_weather", {"city": "Paris"})]),
    "two analyses, preamble, final": (
        ANALYSIS + "<|start|>assistant<|channel|>analysis<|message|>Second thought.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Note.<|end|>" + FINAL,
        "The user wants weather. Use the tool.\nSecond thought.", "Note.\n\nIt is <b>sunny</b> in Paris.", []),
    "a missing <|end|> between messages": ("<|channel|>analysis<|message|>think" + FINAL, "think",
                                           "It is <b>sunny</b> in Paris.", []),
    "two calls": (CALL_IN_CHANNEL + "<|call|>" + CALL_IN_ROLE.replace("Paris", "Rome"), None, "",
                  [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]),
    "a call cut by the token limit": (ANALYSIS + '<|start|>assistant to=functions.get_weather<|channel|>commentary'
                                      ' json<|message|>{"city": "Par', "The user wants weather. Use the tool.", "",
                                      [("get_weather", '{"city": "Par')]),
    "a built-in tool": ("<|channel|>analysis<|message|>search<|end|><|start|>assistant<|channel|>analysis "
                        'to=browser.search<|message|>{"query": "x"}', "search", "",
                        [("browser.search", {"query": "x"})]),
    # gpt-oss-20b sometimes opens with a stray commentary channel (llama.cpp's stray_commentary): the
    # header's last channel is the message's
    "stray commentary before the analysis": (
        "<|channel|>commentary to=assistant<|channel|>analysis<|message|>think<|end|>" + FINAL, "think",
        "It is <b>sunny</b> in Paris.", []),
    "stray commentary before analysis and final": (
        "<|channel|>commentary<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary"
        "<|channel|>final<|message|>Hi", "think", "Hi", []),
    "empty analysis": ("<|channel|>analysis<|message|><|end|>" + FINAL, "", "It is <b>sunny</b> in Paris.", []),
    "not Harmony at all": ("Hello <there>, 1 < 2", None, "Hello <there>, 1 < 2", []),
    "cut inside the header": (ANALYSIS + "<|start|>assistant<|channel|>fin", "The user wants weather. Use the tool.",
                              "", []),
}


def _calls(calls: list[dict]) -> list[tuple[str, object]]:
    out = []
    for c in calls:
        try:
            out.append((c["name"], json.loads(c["arguments"])))
        except json.JSONDecodeError:
            out.append((c["name"], c["arguments"]))
    return out


@pytest.mark.parametrize("name", CASES)
def test_parse(name):
    text, reasoning, content, calls = CASES[name]
    answer = parse_harmony(text)
    assert (answer.reasoning, answer.content, _calls(answer.calls)) == (reasoning, content, calls)


def _streamed(text: str, cuts: list[int]) -> tuple[list[tuple[str, str]], list[dict]]:
    stream = HarmonyStream()
    pieces: list[tuple[str, str]] = []
    bounds = [0, *cuts, len(text)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        pieces += stream.feed(text[a:b])
    return pieces + stream.finish(), stream.calls


@pytest.mark.parametrize("name", CASES)
def test_stream_split_anywhere_gives_the_same_parts_and_no_markup(name):
    text, reasoning, content, calls = CASES[name]
    splits = [[k] for k in range(1, len(text))] + [list(range(1, len(text)))]   # one cut anywhere; every char
    for cuts in splits:
        pieces, got_calls = _streamed(text, cuts)
        assert "".join(t for k, t in pieces if k == "reasoning") == (reasoning or "")
        assert "".join(t for k, t in pieces if k == "text") == content
        assert _calls(got_calls) == calls
        assert all(t and "<|" not in t for _, t in pieces), pieces


def test_text_streams_before_the_answer_ends():
    assert HarmonyStream().feed(ANALYSIS[:40]) == [("reasoning", "The user w")]
    out = HarmonyStream().feed("<|channel|>final<|message|>Hello wor")
    assert out == [("text", "Hello wor")]
    held = HarmonyStream().feed("<|channel|>final<|message|>Hello <|en")     # may be <|end|>: held
    assert held == [("text", "Hello ")]


# ----- the server's seam: AnswerFormat, split_answer, AnswerStream --------------------------------

def test_split_answer_keeps_calls_only_when_tools_were_offered():
    text = ANALYSIS + CALL_IN_CHANNEL
    assert _calls(split_answer(text, HARMONY, TOOLS)[2]) == [("get_weather", {"city": "Paris"})]
    reasoning, content, calls = split_answer(text, HARMONY, None)
    assert (reasoning, content, calls) == ("The user wants weather. Use the tool.", "", [])


def test_answer_stream_harmony():
    stream = AnswerStream(HARMONY, TOOLS)
    text = ANALYSIS + "<|start|>assistant<|channel|>commentary<|message|>One moment.<|end|>" + CALL_IN_ROLE
    pieces = [p for ch in text for p in stream.feed(ch)]
    last, rest, calls = stream.finish(text)
    pieces += last
    assert "".join(t for k, t in pieces if k == "reasoning") == "The user wants weather. Use the tool."
    assert "".join(t for k, t in pieces if k == "text") == "One moment."
    assert rest == "" and _calls(calls) == [("get_weather", {"city": "Paris"})]


class _TextEngine:
    """The text side of an engine (a real tokenizer of a generated vocabulary), as answer_format reads it."""

    def __init__(self, extra: tuple[str, ...]) -> None:
        v = build_vocab(512)
        self.tokenizer = Tokenizer.from_metadata({
            "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-4o",
            "tokenizer.ggml.tokens": list(v.tokens) + list(extra),
            "tokenizer.ggml.token_type": list(v.token_types) + [3] * len(extra),
            "tokenizer.ggml.merges": list(v.merges)})

    def detokenize(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)


def test_format_is_found_from_the_vocabulary():
    oss = _TextEngine(("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>"))
    assert is_harmony_vocabulary(oss.tokenizer)
    assert answer_format(oss, [1, 2, 3]) == HARMONY
    chatml = _TextEngine(("<think>", "</think>"))
    prompt = chatml.tokenizer.encode("<|im_start|>assistant\n<think>\n")
    assert answer_format(chatml, prompt) == AnswerFormat(opened=True)
    only_channel = _TextEngine(("<|channel|>",))          # both markup tokens are needed
    assert not answer_format(only_channel, [1]).harmony


@pytest.mark.parametrize(("value", "expected"), [(None, {}), ("low", {"reasoning_effort": "low"}),
                                                 ("high", {"reasoning_effort": "high"}),
                                                 ("minimal", {"reasoning_effort": "low"}),
                                                 ("xhigh", {"reasoning_effort": "high"})])
def test_reasoning_effort_values(value, expected):
    assert reasoning_effort(value, "reasoning_effort") == expected


def test_every_reasoning_effort_the_openai_sdk_defines_reads_as_a_level():
    """openai 3.60 added "max" (a 400 before); a level a later SDK adds fails here until it is mapped."""
    import typing

    from openai.types.shared.reasoning_effort import ReasoningEffort

    levels = [v for arg in typing.get_args(ReasoningEffort) for v in typing.get_args(arg)]
    assert "max" in levels
    for value in levels:
        assert reasoning_effort(value, "reasoning_effort")["reasoning_effort"] in ("low", "medium", "high"), value
    assert reasoning_effort("max", "reasoning_effort") == {"reasoning_effort": "high"}


@pytest.mark.parametrize("value", ["maximum", 3, ""])
def test_reasoning_effort_bad_values_are_a_400_naming_the_field(value):
    with pytest.raises(APIError) as err:
        reasoning_effort(value, "reasoning.effort")
    assert err.value.status == 400 and "'reasoning.effort' must be one of" in str(err.value)


# ----- the three APIs' answer objects ---------------------------------------------------------------

def done(text: str, finish: str = "stop") -> Completion:
    return Completion(text=text, tokens=list(range(9)), finish_reason=finish, stop_sequence=None,
                      prompt_tokens=50, cached_tokens=0, prompt_ms=5.0, predicted_ms=9.0)


def test_openai_chat_completion_from_a_harmony_call():
    body = chat_response(done(ANALYSIS + CALL_IN_CHANNEL), "gpt-oss", TOOLS, HARMONY)
    choice = openai.types.chat.ChatCompletion.model_validate(body).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.model_extra["reasoning_content"] == "The user wants weather. Use the tool."
    assert choice.message.content is None
    call = choice.message.tool_calls[0].function
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}


def test_openai_chat_completion_from_a_harmony_answer():
    body = chat_response(done(ANALYSIS + FINAL), "gpt-oss", None, HARMONY)
    message = body["choices"][0]["message"]
    assert message["content"] == "It is <b>sunny</b> in Paris." and body["choices"][0]["finish_reason"] == "stop"
    assert message["reasoning_content"] == "The user wants weather. Use the tool."


def test_anthropic_message_from_a_harmony_call():
    body = message_response(done(ANALYSIS + CALL_IN_ROLE), "gpt-oss", "msg_1", TOOLS, HARMONY)
    msg = anthropic.types.Message.model_validate(body)
    assert [b.type for b in msg.content] == ["thinking", "tool_use"]
    assert msg.content[0].thinking == "The user wants weather. Use the tool."
    assert msg.content[1].name == "get_weather" and msg.content[1].input == {"city": "Paris"}
    assert msg.stop_reason == "tool_use"


def test_responses_output_from_a_harmony_call():
    body_tools = [{"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]
    shape = _Shape({"tools": body_tools}, "gpt-oss", TOOLS, set(), HARMONY)
    c = done(ANALYSIS + "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>" + CALL_IN_CHANNEL)
    response = Response.model_validate(shape.response(c, shape.output(c)))
    assert [i.type for i in response.output] == ["reasoning", "message", "function_call"]
    assert response.output[0].content[0].text == "The user wants weather. Use the tool."
    assert response.output[1].content[0].text == "Checking."
    assert response.output[2].name == "get_weather" and json.loads(response.output[2].arguments) == {"city": "Paris"}


def test_arguments_nested_too_deep_for_json_stay_as_written():
    """A call body nested deeper than Python's json reads (RecursionError, not a ValueError) is kept as
    written, as an unparsable one is, instead of the error escaping from the answer's reading."""
    body = "[" * 100_000
    answer = parse_harmony("<|channel|>commentary to=functions.f<|message|>" + body)
    assert answer.calls == [{"name": "f", "arguments": body}]
