"""A gpt-oss-style model end to end through the real `openai` and `anthropic` SDKs: a tiny llama model
(tests/fixtures/tiny_gguf.py `script`: real weights, known output) whose vocabulary has Harmony's tokens,
whose template is gpt-oss's real one and whose pre-tokenizer is "gpt-4o". One model answers with its
analysis then a tool call (ending at `<|call|>`), another with its analysis then a final answer (ending at
`<|return|>`; the `<|end|>` after the analysis must not end generation). Reasoning, tool name and
arguments arrive, streamed and not, and no Harmony markup reaches any text."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import openai
import pytest
from strata.server.anthropic_api import parse_messages as anthropic_messages
from strata.server.openai_api import parse_messages as openai_messages
from strata.server.prompting import render_chat

from tests.server.live import LiveServer, sdk_clients

TEMPLATE = (Path(__file__).resolve().parents[1] / "fixtures" / "gpt_oss_template.jinja").read_text(encoding="utf-8")
BASE_VOCAB = 512          # the generated vocabulary's size; added tokens follow it
THOUGHT, ARGS, ANSWER = "The user wants the weather.", '{"city": "Paris"}', "Sunny in Paris."
SPECIALS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>")
WORDS = ("assistant", "analysis", "commentary", "final", "json", " to=functions.get_weather ", THOUGHT, ARGS, ANSWER)
# second copies: a script's ids must all differ, and its answer writes these twice (the prompt's last
# token is "assistant" too); a text maps to its last copy when tokenized, both copies render the same
SECOND = ("assistant", "<|channel|>", "<|message|>")
ADDED = SPECIALS + WORDS + SECOND
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "required": ["city"],
                                                          "properties": {"city": {"type": "string"}}}}}]
CLAUDE_TOOLS = [{"name": "get_weather", "description": "Weather of a city",
                 "input_schema": TOOLS[0]["function"]["parameters"]}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


def tid(text: str, copy: int = 0) -> int:
    return BASE_VOCAB + [i for i, t in enumerate(ADDED) if t == text][copy]


# after the prompt's "<|start|>assistant" (its last token, the second copy of "assistant")
ANALYSIS = [tid("<|channel|>"), tid("analysis"), tid("<|message|>"), tid(THOUGHT), tid("<|end|>"),
            tid("<|start|>"), tid("assistant"), tid("<|channel|>", 1)]
CALL_SCRIPT = [tid("assistant", 1), *ANALYSIS, tid("commentary"), tid(" to=functions.get_weather "),
               tid("<|constrain|>"), tid("json"), tid("<|message|>", 1), tid(ARGS), tid("<|call|>")]
FINAL_SCRIPT = [tid("assistant", 1), *ANALYSIS, tid("final"), tid("<|message|>", 1), tid(ANSWER), tid("<|return|>")]


def harmony_model(factory, script: list[int]) -> Path:
    return factory(ctx_len=2048, n_vocab=BASE_VOCAB, seed=5, tokenizer_pre="gpt-4o", chat_template=TEMPLATE,
                   added_tokens=ADDED, script=tuple(script))


def harmony_server(factory, script: list[int]) -> LiveServer:
    return LiveServer(model=str(harmony_model(factory, script)), ctx=2048, batch=2, threads=1,
                      conversation_cache_mib=0)


@pytest.fixture(scope="module")
def caller(tiny_model_factory):
    with harmony_server(tiny_model_factory, CALL_SCRIPT) as server:
        yield server


@pytest.fixture(scope="module")
def answerer(tiny_model_factory):
    with harmony_server(tiny_model_factory, FINAL_SCRIPT) as server:
        yield server


def no_markup(value) -> None:
    text = json.dumps(value) if not isinstance(value, str) else value
    assert "<|" not in text, text


def test_the_prompt_ends_where_the_script_starts(caller):
    engine = caller.state.engine
    assert caller.state.engine.tokenizer.pre == "gpt-4o"
    prompt = render_chat(engine, ASK, TOOLS)
    assert prompt[-1] == CALL_SCRIPT[0] and prompt[-2] == tid("<|start|>")
    eog = engine.eos_token_ids
    assert {tid("<|return|>"), tid("<|call|>")} <= eog and tid("<|end|>") not in eog


# ----- analysis + a tool call ------------------------------------------------------------------------

def test_openai_tool_call(caller):
    oai, _ = sdk_clients(caller)
    r = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=0, max_tokens=40)
    choice = r.choices[0]
    no_markup(r.model_dump())
    assert choice.finish_reason == "tool_calls"
    assert choice.message.model_extra["reasoning_content"] == THOUGHT
    assert not choice.message.content
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}

    chunks = list(oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=0, max_tokens=40,
                                              stream=True))
    no_markup([c.model_dump() for c in chunks])
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == THOUGHT
    assert "".join(d.content or "" for d in deltas) == ""
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_the_call_is_held_to_the_offered_tools(caller):
    """The call the model opens in its header (`to=functions.`) is held (json_args_call): /metrics counts it;
    the script's call is the tool's own, so the held answer is the same as the free one."""
    import httpx2 as httpx

    def held() -> float:
        lines = httpx.get(caller.url + "/metrics").text.splitlines()
        return sum(float(x.split(" ")[1]) for x in lines if x.startswith('strata_held_answers_total{rule="calls"}'))

    oai, _ = sdk_clients(caller)
    before = held()
    r = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=0, max_tokens=40)
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["get_weather"]
    assert held() == before + 1


def test_anthropic_tool_use(caller):
    _, claude = sdk_clients(caller)
    m = claude.messages.create(model="m", max_tokens=40, messages=ASK, tools=CLAUDE_TOOLS,
                               extra_body={"temperature": 0})
    no_markup(m.model_dump())
    assert [b.type for b in m.content] == ["thinking", "tool_use"] and m.stop_reason == "tool_use"
    assert m.content[0].thinking == THOUGHT
    assert (m.content[1].name, m.content[1].input) == ("get_weather", {"city": "Paris"})
    with claude.messages.stream(model="m", max_tokens=40, messages=ASK, tools=CLAUDE_TOOLS,
                                extra_body={"temperature": 0}) as s:
        events = list(s)
        final = s.get_final_message()
    no_markup([e.model_dump() for e in events])
    assert [b.type for b in final.content] == ["thinking", "tool_use"]
    assert final.content[0].thinking == THOUGHT and final.content[1].input == {"city": "Paris"}


def test_responses_function_call(caller):
    oai, _ = sdk_clients(caller)
    tools = [{"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]
    r = oai.responses.create(model="m", input="Weather in Paris?", tools=tools, temperature=0, max_output_tokens=40)
    no_markup(r.model_dump())
    assert [o.type for o in r.output] == ["reasoning", "function_call"]
    assert r.output[0].content[0].text == THOUGHT
    assert r.output[1].name == "get_weather" and json.loads(r.output[1].arguments) == {"city": "Paris"}
    with oai.responses.stream(model="m", input="Weather in Paris?", tools=tools, temperature=0,
                              max_output_tokens=40) as s:
        events = list(s)
        final = s.get_final_response()
    no_markup([e.model_dump() for e in events])
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == THOUGHT
    assert [o.type for o in final.output] == ["reasoning", "function_call"]
    assert json.loads(final.output[1].arguments) == {"city": "Paris"}


def test_the_history_goes_back_through_the_template(caller):
    """An agent's next turn: the call it got back (with its reasoning) and the tool's result, in both wire
    forms; the server renders gpt-oss's template with them (the call's reasoning kept: no final answer yet)."""
    oai, claude = sdk_clients(caller)
    history = ASK + [
        {"role": "assistant", "content": None, "reasoning_content": THOUGHT, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    r = oai.chat.completions.create(model="m", messages=history, tools=TOOLS, temperature=0, max_tokens=40)
    assert r.choices[0].message.tool_calls[0].function.name == "get_weather"
    claude_history = ASK + [
        {"role": "assistant", "content": [{"type": "thinking", "thinking": THOUGHT, "signature": ""},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}]
    m = claude.messages.create(model="m", max_tokens=40, messages=claude_history, tools=CLAUDE_TOOLS)
    assert m.content[-1].type == "tool_use"
    engine = caller.state.engine
    for messages in (openai_messages(history), anthropic_messages(claude_history, None)):
        text = engine.detokenize(render_chat(engine, messages, TOOLS))
        assert (f"<|start|>assistant<|channel|>analysis<|message|>{THOUGHT}<|end|>"
                f"<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>") in text
        assert ('<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|>'
                "<|start|>assistant") in text


def test_a_prefilled_answer_continues_the_final_message(caller):
    engine = caller.state.engine
    text = engine.detokenize(render_chat(engine, ASK, None, prefill="Sure,"))
    # llama.cpp's continuation (common/parsers/gpt-oss.cpp): an analysis message (empty: the prefill has
    # no reasoning), then the final message the prefill starts
    assert text.endswith("<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant"
                         "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>Sure,")


def test_reasoning_effort_reaches_the_template(caller):
    oai, _ = sdk_clients(caller)
    r = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, max_tokens=40, reasoning_effort="high")
    assert r.choices[0].message.tool_calls
    text = caller.state.engine.detokenize(render_chat(caller.state.engine, ASK, TOOLS, template_vars={
        "reasoning_effort": "high"}))
    assert "Reasoning: high" in text
    with pytest.raises(openai.BadRequestError, match="reasoning_effort"):
        oai.chat.completions.create(model="m", messages=ASK, max_tokens=4, extra_body={"reasoning_effort": "maximum"})
    with pytest.raises(openai.BadRequestError, match="reasoning.effort"):
        oai.responses.create(model="m", input="hi", max_output_tokens=4, reasoning={"effort": "maximum"})


def test_anthropic_output_effort_reaches_the_template(caller):
    """`output_config.effort` (the anthropic SDK's low ... max) is the template's reasoning effort, as
    `reasoning_effort` is on chat completions: it was ignored (gpt-oss thought at its default, medium)."""
    _, claude = sdk_clients(caller)
    engine = caller.state.engine

    def counted(**kw):
        return claude.messages.count_tokens(model="m", messages=ASK, **kw).input_tokens

    def rendered(effort):
        return len(render_chat(engine, ASK, None, template_vars={"reasoning_effort": effort} if effort else None))

    assert counted() == rendered(None) != rendered("low")
    assert counted(output_config={"effort": "low"}) == rendered("low")
    assert counted(output_config={"effort": "max"}) == rendered("high")
    r = claude.messages.create(model="m", messages=ASK, max_tokens=4, output_config={"effort": "xhigh"})
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == rendered("high")
    with pytest.raises(anthropic.BadRequestError, match="output_config.effort"):
        claude.messages.create(model="m", messages=ASK, max_tokens=4, output_config={"effort": "maximum"})


# ----- analysis + a final answer -----------------------------------------------------------------------

def test_openai_final_answer(answerer):
    oai, _ = sdk_clients(answerer)
    r = oai.chat.completions.create(model="m", messages=ASK, temperature=0, max_tokens=40)
    no_markup(r.model_dump())
    assert (r.choices[0].message.model_extra["reasoning_content"], r.choices[0].message.content) == (THOUGHT, ANSWER)
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens == len(FINAL_SCRIPT) - 2
    assert r.usage.completion_tokens_details.reasoning_tokens == 5    # the analysis message, through <|end|>
    chunks = list(oai.chat.completions.create(model="m", messages=ASK, temperature=0, max_tokens=40, stream=True))
    no_markup([c.model_dump() for c in chunks])
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == THOUGHT
    assert "".join(d.content or "" for d in deltas) == ANSWER


def test_anthropic_final_answer(answerer):
    _, claude = sdk_clients(answerer)
    m = claude.messages.create(model="m", max_tokens=40, messages=ASK, extra_body={"temperature": 0})
    no_markup(m.model_dump())
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in m.content] == [
        ("thinking", THOUGHT), ("text", ANSWER)]
    assert m.stop_reason == "end_turn"
    with claude.messages.stream(model="m", max_tokens=40, messages=ASK, extra_body={"temperature": 0}) as s:
        events = list(s)
        final = s.get_final_message()
    no_markup([e.model_dump() for e in events])
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content] == [
        ("thinking", THOUGHT), ("text", ANSWER)]


def test_a_cut_answer_is_reasoning_only(answerer):
    oai, _ = sdk_clients(answerer)
    r = oai.chat.completions.create(model="m", messages=ASK, temperature=0, max_tokens=4)   # cut in the analysis
    no_markup(r.model_dump())
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].message.model_extra["reasoning_content"] == THOUGHT and not r.choices[0].message.content
    assert r.usage.completion_tokens_details.reasoning_tokens == 4


def test_strata_chat_keeps_the_final_text_for_the_next_turn(tiny_model_factory):
    """`strata chat` (ChatSession): the answer goes back into the conversation as gpt-oss's template wants
    it (final text, analysis as reasoning), so the second turn renders (the template refuses markup)."""
    from strata.engine import Engine
    from strata.engine.chat import ChatSession

    chat = ChatSession(Engine(str(harmony_model(tiny_model_factory, FINAL_SCRIPT)), n_ctx=1024, n_threads=1),
                       max_tokens=40)
    printed: list[str] = []
    assert chat.turn("Weather in Paris?", on_text=printed.append).stop == "eot"
    assert chat.messages[-1] == {"role": "assistant", "content": ANSWER, "reasoning_content": THOUGHT}
    # the terminal shows the thinking and the answer, labelled, and no markup
    assert "".join(printed) == f"[thinking] {THOUGHT}\n[answer] {ANSWER}"
    chat.turn("And tomorrow?")
    assert chat.messages[-1]["content"] == ANSWER and len(chat.messages) == 4


def test_the_gpt_oss_architecture_end_to_end(tiny_model_factory):
    """The same script on arch "gpt-oss" (biases, sinks, sliding window, experts: the engine's own gpt-oss
    path), when this engine runs it (skipped otherwise: the text side does not depend on it)."""
    from strata.engine import check_model

    path = tiny_model_factory(ctx_len=2048, n_vocab=BASE_VOCAB, seed=5, tokenizer_pre="gpt-4o",
                              chat_template=TEMPLATE, added_tokens=ADDED, script=tuple(CALL_SCRIPT),
                              arch="gpt-oss", n_expert=4, n_expert_used=2)
    try:
        check_model(path)
    except ValueError as e:
        pytest.skip(f"this engine does not run gpt-oss: {e}")
    with LiveServer(model=str(path), ctx=2048, batch=2, threads=1, conversation_cache_mib=0) as server:
        oai, claude = sdk_clients(server)
        chunks = list(oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=0,
                                                  max_tokens=40, stream=True))
        no_markup([c.model_dump() for c in chunks])
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == THOUGHT
        calls = [tc for d in deltas for tc in (d.tool_calls or [])]
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
            ("get_weather", {"city": "Paris"})]
        m = claude.messages.create(model="m", max_tokens=40, messages=ASK, tools=CLAUDE_TOOLS)
        no_markup(m.model_dump())
        assert [b.type for b in m.content] == ["thinking", "tool_use"] and m.content[1].input == {"city": "Paris"}


def test_a_json_answer_is_held_in_the_final_channel_only(answerer):
    """response_format on gpt-oss: the analysis channel stays free (the reasoning as scripted), the final
    message is held to the schema (the scripted final text is no JSON)."""
    oai, _ = sdk_clients(answerer)
    schema = {"type": "object", "additionalProperties": False, "required": ["ok"],
              "properties": {"ok": {"type": "boolean"}}}
    r = oai.chat.completions.create(model="m", messages=ASK, temperature=0, max_tokens=200,
                                    response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    choice = r.choices[0]
    no_markup(r.model_dump())
    assert choice.message.model_extra["reasoning_content"] == THOUGHT
    assert choice.finish_reason == "stop" and isinstance(json.loads(choice.message.content)["ok"], bool)


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_inside_the_calls_arguments_leaves_the_call_out(caller, stream):
    """A stop sequence that ends the answer inside a Harmony call's arguments (`Par` in `{"city": "Paris"}`) gave
    the cut call back as a call ('{"city": "', finish_reason tool_calls / stop_reason tool_use: an agent would run
    it), as other formats did before 21ea1be; the stop reason does not say it is cut, so it is left out."""
    oai, claude = sdk_clients(caller)
    kw = dict(model="m", messages=ASK, tools=TOOLS, temperature=0, max_tokens=40, stop=["Par"])
    if stream:
        chunks = [c for c in oai.chat.completions.create(stream=True, **kw) if c.choices]
        calls = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or ()]
        finish = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
    else:
        r = oai.chat.completions.create(**kw).choices[0]
        calls, finish = r.message.tool_calls or [], [r.finish_reason]
    assert (calls, finish) == ([], ["stop"])
    akw = dict(model="m", messages=ASK, tools=CLAUDE_TOOLS, max_tokens=40, stop_sequences=["Par"],
               extra_body={"temperature": 0})
    if stream:
        with claude.messages.stream(**akw) as s:
            m = s.get_final_message()
    else:
        m = claude.messages.create(**akw)
    assert ([b.type for b in m.content if b.type == "tool_use"], m.stop_reason) == ([], "stop_sequence")
