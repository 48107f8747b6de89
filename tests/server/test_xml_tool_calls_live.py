"""A Qwen3-Coder-style agent turn end to end: a scripted tiny qwen3moe model (8 experts, 2 a token) with a
Qwen3-Coder-style chat template (tests/text/test_xml_tool_template.py) always answers "Editing." then an XML
call of `edit_file` whose seven values have seven schema types. Through the real `openai` and `anthropic` SDKs
and the Responses API: the values come out typed by the tools' schemas, the tool result goes back and the
second turn reuses all of the first (the template writes the earlier call back token for token), an answer
cut by max_tokens in the middle of its call says "length" / "max_tokens" (not "tool_calls": an agent would
run a call that lost its arguments), and with no tools offered the text comes back as it is."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from tests.server.live import LiveServer, scripted_model, sdk_clients
from tests.text.test_xml_tool_template import XML_TEMPLATE

VALUES = [("path", "src/main.py"), ("line", "42"), ("replace_all", "true"), ("ratio", "0.5"),
          ("tags", '["a", "b"]'), ("opts", '{"x": 1}'), ("note", "007")]
# each piece one added token, so the script's tokens are all different (tiny_gguf `script`)
PIECES = ("Editing.", "\n<tool_call>\n<function=edit_file>\n",
          *(f"<parameter={n}>\n{v}\n</parameter>\n" for n, v in VALUES), "</function>\n</tool_call>")
ANSWER = "".join(PIECES)
PARAMS = {"type": "object", "required": ["path"], "properties": {
    "path": {"type": "string"}, "line": {"type": "integer"}, "replace_all": {"type": "boolean"},
    "ratio": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}},
    "opts": {"type": "object"}, "note": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "edit_file", "description": "Edit a file.", "parameters": PARAMS}}]
ARGS = {"path": "src/main.py", "line": 42, "replace_all": True, "ratio": 0.5, "tags": ["a", "b"], "opts": {"x": 1},
        "note": "007"}
MSGS = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "fix main"}]


@pytest.fixture(scope="module")
def served(tiny_model_factory):
    model = scripted_model(tiny_model_factory, ANSWER, arch="qwen3moe", ctx_len=2048, n_vocab=512, seed=4,
                           added_tokens=PIECES, n_expert=8, n_expert_used=2, chat_template=XML_TEMPLATE)
    with LiveServer(model=str(model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


def test_openai_typed_call_then_the_result_and_the_whole_first_turn_reused(served):
    oai, _ = served
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=40)
    m = r.choices[0].message
    assert (m.content, r.choices[0].finish_reason) == ("Editing.", "tool_calls")
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [("edit_file", ARGS)]
    turn2 = MSGS + [m.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "edited 1 line"}]
    r2 = oai.chat.completions.create(model="m", messages=turn2, tools=TOOLS, temperature=0, max_tokens=40)
    # the earlier call rendered back is exactly what the model wrote: nothing of turn 1 is read again
    assert r2.usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    chunks = list(oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=40,
                                              stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == ARGS
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_anthropic_typed_tool_use_and_count_tokens_of_the_second_turn(served):
    _, claude = served
    tools = [{"name": "edit_file", "description": "Edit a file.", "input_schema": PARAMS}]
    user = [{"role": "user", "content": "fix main"}]
    m = claude.messages.create(model="m", max_tokens=40, system="You are a coding agent.", messages=user,
                               tools=tools, extra_body={"temperature": 0})
    assert m.stop_reason == "tool_use" and (m.content[1].name, m.content[1].input) == ("edit_file", ARGS)
    turn2 = user + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": m.content[1].id,
                                                  "content": "edited 1 line"}]}]
    counted = claude.messages.count_tokens(model="m", system="You are a coding agent.", messages=turn2, tools=tools)
    m2 = claude.messages.create(model="m", max_tokens=40, system="You are a coding agent.", messages=turn2,
                                tools=tools, extra_body={"temperature": 0})
    first = m.usage.input_tokens + m.usage.cache_read_input_tokens + m.usage.output_tokens
    assert m2.usage.cache_read_input_tokens == first
    assert m2.usage.input_tokens + m2.usage.cache_read_input_tokens == counted.input_tokens


def test_responses_typed_function_call(served):
    oai, _ = served
    tools = [{"type": "function", "name": "edit_file", "description": "Edit a file.", "parameters": PARAMS}]
    r = oai.responses.create(model="m", input="fix main", tools=tools, max_output_tokens=40)
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and [(c.name, json.loads(c.arguments)) for c in calls] == [("edit_file", ARGS)]


@pytest.mark.parametrize("max_tokens", [2, 5, 9])   # the call just opened, half its values, all but the closing tags
def test_a_call_cut_by_max_tokens_is_not_reported_as_a_finished_call(served, max_tokens):
    oai, claude = served
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=max_tokens)
    assert r.choices[0].finish_reason == "length"
    chunks = list(oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0,
                                              max_tokens=max_tokens, stream=True))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    tools = [{"name": "edit_file", "input_schema": PARAMS}]
    m = claude.messages.create(model="m", max_tokens=max_tokens, messages=MSGS[1:], tools=tools)
    assert m.stop_reason == "max_tokens"
    with claude.messages.stream(model="m", max_tokens=max_tokens, messages=MSGS[1:], tools=tools) as s:
        assert s.get_final_message().stop_reason == "max_tokens"
    rtools = [{"type": "function", "name": "edit_file", "parameters": PARAMS}]
    rr = oai.responses.create(model="m", input="fix main", max_output_tokens=max_tokens, tools=rtools)
    assert rr.status == "incomplete"
    assert [o.status for o in rr.output if o.type == "function_call"] == ["incomplete"]
    events = list(oai.responses.create(model="m", input="fix main", max_output_tokens=max_tokens, tools=rtools,
                                       stream=True))
    done = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    assert [i.status for i in done] == ["incomplete"] and events[-1].type == "response.incomplete"


def test_no_tools_offered_the_call_stays_text(served):
    """The template guards with `if not tools is defined`, as llama.cpp renders it (no `tools` variable
    without tools); a `tools` of None there failed the render (`None | length`)."""
    oai, claude = served
    r = oai.chat.completions.create(model="m", messages=MSGS, temperature=0, max_tokens=40)
    assert (r.choices[0].message.content, r.choices[0].message.tool_calls) == (ANSWER, None)
    m = claude.messages.create(model="m", max_tokens=40, messages=MSGS[1:])
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == ANSWER and m.stop_reason == "end_turn"


def test_a_function_without_parameters_is_offered_and_a_bad_properties_is_named(served):
    """OpenAI's `parameters` is optional: such a tool reached the template without one (a Qwen3-Coder-style
    template reading `tool.parameters.properties` failed: 400). A `properties` that is not an object is a
    400 naming it in each API, not the template's TypeError."""
    oai, claude = served
    bare = [{"type": "function", "function": {"name": "edit_file"}}]
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=bare, temperature=0, max_tokens=40)
    assert r.choices[0].finish_reason == "tool_calls"
    # a function without parameters takes none (OpenAI: an empty parameter list): the call is held to that
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {}
    listed = {"type": "object", "properties": ["path", "line"]}
    with pytest.raises(openai.BadRequestError, match=r"tools\[0\]\.function\.parameters\.properties must be an object"):
        oai.chat.completions.create(model="m", messages=MSGS, max_tokens=4, tools=[
            {"type": "function", "function": {"name": "edit_file", "parameters": listed}}])
    with pytest.raises(anthropic.BadRequestError, match=r"tools\[0\]\.input_schema\.properties must be an object"):
        claude.messages.create(model="m", max_tokens=4, messages=MSGS[1:],
                               tools=[{"name": "edit_file", "input_schema": listed}])
    with pytest.raises(openai.BadRequestError, match=r"tools\[0\]\.parameters\.properties must be an object"):
        oai.responses.create(model="m", input="fix", max_output_tokens=4,
                             tools=[{"type": "function", "name": "edit_file", "parameters": listed}])


def test_a_responses_message_max_output_tokens_cut_is_incomplete_with_its_text(served):
    """As a cut call is (5f9267e), a message the token limit cut is `incomplete`, its text kept (OpenAI's
    items in an incomplete response); a message before the calls of a cut answer was finished: completed."""
    oai, _ = served
    rr = oai.responses.create(model="m", input="fix main", max_output_tokens=1)
    assert rr.status == "incomplete"
    assert [(o.type, o.status, o.content[0].text) for o in rr.output] == [("message", "incomplete", "Editing.")]
    events = list(oai.responses.create(model="m", input="fix main", max_output_tokens=1, stream=True))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.status, i.content[0].text) for i in done] == [("incomplete", "Editing.")]
    assert [(o.status, o.content[0].text) for o in events[-1].response.output] == [("incomplete", "Editing.")]
    rtools = [{"type": "function", "name": "edit_file", "parameters": PARAMS}]
    cut = oai.responses.create(model="m", input="fix main", max_output_tokens=5, tools=rtools)
    assert [(o.type, o.status) for o in cut.output] == [("message", "completed"), ("function_call", "incomplete")]
