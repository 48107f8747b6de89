"""Parallel tool calls turned off, through the real `openai` and `anthropic` SDKs on a live server: OpenAI's
`parallel_tool_calls: false` (chat completions, Responses) and Anthropic's `disable_parallel_tool_use`
give an answer of one call whose generation ended once that call was whole (fewer tokens than the answer
with both calls), streamed and not, still finishing as a call; left on, both calls come back."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from tests.server.live import LiveServer

CALLS = ('{"name": "get_weather", "arguments": {"city": "Oslo"}}', '{"name": "get_time", "arguments": {}}')
# the script's tokens, each an added token (a script's tokens must all differ): two calls, each whole
SCRIPT = ("Checking.", "<tool_call>", f"\n{CALLS[0]}\n", "</tool_call>", f"\n<tool_call>\n{CALLS[1]}", "\n</tool_call>")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
A_TOOLS = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
R_TOOLS = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
           for t in TOOLS]
ASK = [{"role": "user", "content": "Weather and time in Oslo?"}]
FIRST = ("get_weather", {"city": "Oslo"})


@pytest.fixture(scope="module", params=["chatml", "qwen-like"])
def server(tiny_model_factory, request):
    """A tiny model that always answers "Checking." then two calls, each in its own <tool_call> block; its
    template ChatML without tools (Strata writes them into the system prompt; the answer is free), or one
    that writes Hermes calls (each call the model opens is held to the tools: the cut works on held calls)."""
    from tests.text.test_chat_template import QWEN_LIKE

    template = {"chatml": {}, "qwen-like": {"chat_template": QWEN_LIKE}}[request.param]
    shape = dict(ctx_len=2048, n_vocab=512, seed=3, added_tokens=SCRIPT, **template)
    ids = (13, *range(512, 512 + len(SCRIPT)), 2)    # after the prompt's last "\n": the added tokens, <|im_end|>
    with LiveServer(model=str(tiny_model_factory(**shape, script=ids)), ctx=2048, batch=2, threads=1,
                    conversation_cache_mib=0) as s:
        yield s


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=120)


def chat(oai, **kw):
    return oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=0, max_tokens=200, **kw)


def calls_of(tool_calls) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in tool_calls]


def test_chat_answers_one_call_and_stops_generating_after_it(oai):
    both = chat(oai)
    assert calls_of(both.choices[0].message.tool_calls) == [FIRST, ("get_time", {})]
    one = chat(oai, parallel_tool_calls=False)
    assert one.choices[0].message.content == "Checking."
    assert calls_of(one.choices[0].message.tool_calls) == [FIRST]
    assert one.choices[0].finish_reason == "tool_calls"
    # generation ended at the first call's closing tag: the second call's two tokens and the end were
    # never generated
    assert one.usage.completion_tokens <= both.usage.completion_tokens - 2
    assert chat(oai, parallel_tool_calls=True).usage.completion_tokens == both.usage.completion_tokens


def test_chat_streamed_answers_one_call(oai):
    chunks = list(chat(oai, parallel_tool_calls=False, stream=True, stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == "Checking."
    calls = [tc for d in deltas for tc in d.tool_calls or ()]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [FIRST]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert chunks[-1].usage.completion_tokens == chat(oai, parallel_tool_calls=False).usage.completion_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_responses_answers_one_function_call(oai, stream):
    def ask(**kw):
        if not stream:
            return oai.responses.create(model="m", input=ASK, tools=R_TOOLS, temperature=0, max_output_tokens=200,
                                        **kw)
        events = list(oai.responses.create(model="m", input=ASK, tools=R_TOOLS, temperature=0,
                                           max_output_tokens=200, stream=True, **kw))
        assert events[-1].type == "response.completed"
        return events[-1].response

    both, one = ask(), ask(parallel_tool_calls=False)
    assert [o.name for o in both.output if o.type == "function_call"] == ["get_weather", "get_time"]
    assert [(o.name, json.loads(o.arguments)) for o in one.output if o.type == "function_call"] == [FIRST]
    assert one.status == "completed" and one.parallel_tool_calls is False
    assert one.usage.output_tokens <= both.usage.output_tokens - 2


@pytest.mark.parametrize("kind", ["auto", "any"])
def test_anthropic_disable_parallel_tool_use(claude, kind):
    def ask(**choice):
        return claude.messages.create(model="m", max_tokens=200, messages=ASK, tools=A_TOOLS,
                                      tool_choice={"type": kind, **choice}, extra_body={"temperature": 0})

    both, one = ask(), ask(disable_parallel_tool_use=True)
    if kind == "auto":
        assert [b.name for b in both.content if b.type == "tool_use"] == ["get_weather", "get_time"]
    assert [(b.name, b.input) for b in one.content if b.type == "tool_use"] == [FIRST]
    assert one.stop_reason == "tool_use"
    with claude.messages.stream(model="m", max_tokens=200, messages=ASK, tools=A_TOOLS, extra_body={"temperature": 0},
                                tool_choice={"type": kind, "disable_parallel_tool_use": True}) as s:
        final = s.get_final_message()
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [FIRST]
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == one.usage.output_tokens
    if kind == "auto":
        assert one.usage.output_tokens <= both.usage.output_tokens - 2


@pytest.mark.parametrize("field, value, needle", [
    ("parallel_tool_calls", "no", "'parallel_tool_calls' must be a boolean"),
    ("parallel_tool_calls", 0, "'parallel_tool_calls' must be a boolean"),
])
def test_a_bad_value_is_a_400_naming_the_field(oai, claude, field, value, needle):
    with pytest.raises(openai.BadRequestError) as e:
        chat(oai, extra_body={field: value})
    assert needle in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="m", input="hi", tools=R_TOOLS, extra_body={field: value})
    assert needle in str(e.value)
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=8, messages=ASK, tools=A_TOOLS,
                               tool_choice={"type": "auto", "disable_parallel_tool_use": "yes"})
    assert "'tool_choice.disable_parallel_tool_use' must be a boolean" in str(e.value)


# ----- where the cut looks (server/one_call.py), on text alone -----

def cut_at(fmt, pieces: list[str]) -> int | None:
    """The index of the piece after which FirstCallEnd ends the answer, None when it never does."""
    from strata.server.one_call import FirstCallEnd

    end = FirstCallEnd(fmt, TOOLS)
    return next((i for i, p in enumerate(pieces) if end.feed(p)), None)


def test_the_cut_waits_for_a_whole_call_outside_the_reasoning():
    from strata.server.prompting import AnswerFormat

    thinking = AnswerFormat(opened=True)
    # a closing tag in the reasoning, or one that closes no call, ends nothing; the call's own does, even
    # split over two pieces
    assert cut_at(thinking, ["a </tool_call> b", "</think>Hm <tool_call>x</tool_call>", "<tool_call>\n",
                             CALLS[0], "\n</tool", "_call>", "more"]) == 5
    mistral = AnswerFormat(mistral_calls=True)
    assert cut_at(mistral, ["[TOOL_CALLS]get_weather[ARGS]", '{"city": {"a": 1}', ', "b": "x}', '"}', "[TOOL_CALLS]"]) == 3
    assert cut_at(AnswerFormat(), ["Just text } and </tool_call>"]) is None
    assert cut_at(mistral, ['{"a": 1}', "[TOOL_CALLS]get_time[ARGS]{}"]) == 1     # text's } before the call


# ----- Mistral's calls, which have no closing tag, after its [THINK] reasoning -----

AFTER_CALL = " and then"     # text after the call: generated only when the cut does not end the answer there


@pytest.fixture(scope="module")
def ministral(tiny_model_factory):
    """A tiny model with Ministral 3 Reasoning's template answering `[THINK]Need a.py.[/THINK]Reading it.
    [TOOL_CALLS]read_file[ARGS]{"path": "a.py"}` and then more text."""
    from strata.engine import Engine

    from tests.server import test_mistral_live as ml

    shape = dict(ctx_len=4096, n_vocab=512, seed=5, tokenizer_pre="tekken", added_tokens=(*ml.ADDED, AFTER_CALL),
                 chat_template=ml.MINISTRAL3)
    probe = Engine(str(tiny_model_factory(**shape)), n_ctx=64, n_threads=1)
    ids = probe.tokenize("[/INST]" + "".join(ml.THINKING) + AFTER_CALL, special=True)
    assert len(ids) == len(ml.THINKING) + 2, "each piece must be one token"
    model = tiny_model_factory(**shape, script=(*ids, probe.tokenizer.eos_id))
    with LiveServer(model=str(model), ctx=4096, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120), ml


def test_a_mistral_call_ends_the_answer_where_its_arguments_close(ministral):
    oai, ml = ministral

    def ask(**kw):
        return oai.chat.completions.create(model="m", messages=ml.MSGS, tools=ml.TOOLS, temperature=0, max_tokens=40,
                                           **kw)

    free, one = ask(), ask(parallel_tool_calls=False)
    assert free.choices[0].message.content.endswith(AFTER_CALL.strip())      # the text after the call
    m = one.choices[0].message
    assert (m.reasoning_content, m.content, one.choices[0].finish_reason) == ("Need a.py.", "Reading it.", "tool_calls")
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [("read_file",
                                                                                           {"path": "a.py"})]
    assert one.usage.completion_tokens == free.usage.completion_tokens - 1
    assert one.usage.completion_tokens_details.reasoning_tokens == 3                # [THINK] Need a.py. [/THINK]
