"""GLM agent turns end to end, through the real `openai` and `anthropic` SDKs and the Responses API, on
scripted tiny models (tests/fixtures/tiny_gguf.py `script`: real weights, known output, llama's layers: the
glm4moe engine is tested apart) with GLM's real templates (tests/fixtures/) and its "glm4" pre-tokenizer:

- GLM-4.6's template: the model answers `\\n<think>Need ls.</think>\\nLet me look.\\n<tool_call>bash\\n<arg_key>
  command</arg_key>\\n<arg_value>ls -la</arg_value>\\n<arg_key>timeout</arg_key>\\n<arg_value>30</arg_value>\\n
  </tool_call>`; GLM-4.7-Flash's (its prompt opens `<think>`): the same without the newlines.
- Reasoning, text and the call come out apart in each API, streamed and not, with no markup; the values
  typed by the tool's schema (timeout an integer); the call and the reasoning go back and the second turn
  reuses all of the first; a cut call says "length" / "max_tokens" / incomplete and comes back as a cut call (its arguments as far as
  written), never its markup as text (test_cut_calls_glm.py reads the cuts one by one).

The markup words are added tokens (USER_DEFINED in tiny_gguf, CONTROL in real GLM files: both are parsed in
prompts and decoded as text)."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.server.live import LiveServer, check_cut_call, check_reasoning_text_and_call, sdk_clients

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TEMPLATES = {name: (FIXTURES / f"{name}.jinja").read_text(encoding="utf-8") for name in ("GLM-4.6", "GLM-4.7-Flash")}
ARG1, ARG2 = ("<arg_key>command</arg_key>", "<arg_value>ls -la</arg_value>"), \
    ("<arg_key>timeout</arg_key>", "<arg_value>30</arg_value>")
# each piece one token (the script's tokens must all differ); GLM-4.7's prompt ends with "<think>"
PIECES = {
    "GLM-4.6": ("\n<think>", "Need ls.", "</think>", "\nLet me look.", "\n<tool_call>bash", "\n" + "\n".join(ARG1),
                "\n" + "\n".join(ARG2), "\n</tool_call>"),
    "GLM-4.7-Flash": ("Need ls.", "</think>", "Let me look.", "<tool_call>bash", "".join(ARG1), "".join(ARG2),
                      "</tool_call>"),
}
MARKUP = ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>",
          "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>",
          "<arg_value>", "</arg_value>")
ADDED = tuple(dict.fromkeys(MARKUP + PIECES["GLM-4.6"] + PIECES["GLM-4.7-Flash"]))
PARAMS = {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
          "required": ["command"]}
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": PARAMS}}]
CLAUDE_TOOLS = [{"name": "bash", "description": "Run a command.", "input_schema": PARAMS}]
RESPONSES_TOOLS = [{"type": "function", "name": "bash", "description": "Run a command.", "parameters": PARAMS}]
MSGS = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "list the files"}]
ARGS = {"command": "ls -la", "timeout": 30}


def glm_model(factory, name: str):
    """A tiny model that answers PIECES[name] (then its end token) after the generation prompt's last token
    (`<|assistant|>` for GLM-4.6, `<think>` for GLM-4.7)."""
    from strata.engine import Engine

    shape = dict(ctx_len=4096, n_vocab=512, seed=6, tokenizer_pre="glm4", added_tokens=ADDED,
                 chat_template=TEMPLATES[name])
    probe = Engine(str(factory(**shape)), n_ctx=64, n_threads=1)
    last = "<think>" if name == "GLM-4.7-Flash" else "<|assistant|>"
    ids = probe.tokenize(last + "".join(PIECES[name]), special=True)
    assert len(ids) == len(PIECES[name]) + 1, "each piece must be one token"
    return factory(**shape, script=(*ids, probe.tokenizer.eos_id))


@pytest.fixture(scope="module", params=list(TEMPLATES))
def served(tiny_model_factory, request):
    model = glm_model(tiny_model_factory, request.param)
    with LiveServer(model=str(model), ctx=4096, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


def test_openai_reasoning_text_and_typed_call_then_the_first_turn_reused(served):
    oai, _ = served
    chunks = check_reasoning_text_and_call(oai, MSGS, TOOLS, ARGS)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_anthropic_thinking_text_and_tool_use_then_reused(served):
    _, claude = served
    user = MSGS[1:]
    kw = dict(model="m", max_tokens=40, system="You are a coding agent.", tools=CLAUDE_TOOLS,
              extra_body={"temperature": 0})
    m = claude.messages.create(messages=user, **kw)
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use"] and m.stop_reason == "tool_use"
    assert (m.content[0].thinking, m.content[1].text) == ("Need ls.", "Let me look.")
    assert (m.content[2].name, m.content[2].input) == ("bash", ARGS)
    first = m.usage.input_tokens + m.usage.cache_read_input_tokens
    result = {"type": "tool_result", "tool_use_id": m.content[2].id, "content": "a.py"}
    turn2 = user + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                    {"role": "user", "content": [result]}]
    m2 = claude.messages.create(messages=turn2, **{**kw, "max_tokens": 4})
    assert m2.usage.cache_read_input_tokens == first + m.usage.output_tokens
    # Claude Code's shape, a reminder beside the result, is a user message after the turn: GLM's templates
    # then drop the turn's reasoning (they keep only the reasoning after the last user message), so the
    # turn is read again from its reasoning on (GLM-4.7 from the prompt's last token: it writes "</think>"
    # for a turn without reasoning where the prompt opened "<think>"), as in llama.cpp
    reminder = {"type": "text", "text": "<system-reminder>be brief</system-reminder>"}
    turn2[-1] = {"role": "user", "content": [result, reminder]}
    m3 = claude.messages.create(messages=turn2, **{**kw, "max_tokens": 4})
    assert first - 1 <= m3.usage.cache_read_input_tokens < first + m.usage.output_tokens
    with claude.messages.stream(messages=user, **kw) as s:
        events = list(s)
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"] and final.content[2].input == ARGS
    texts = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    assert "".join(texts) == "Let me look."


def test_responses_reasoning_message_and_function_call(served):
    oai, _ = served
    r = oai.responses.create(model="m", input="list the files", tools=RESPONSES_TOOLS, max_output_tokens=40)
    assert [o.type for o in r.output] == ["reasoning", "message", "function_call"] and r.status == "completed"
    assert r.output[0].content[0].text == "Need ls." and r.output[1].content[0].text == "Let me look."
    assert (r.output[2].name, json.loads(r.output[2].arguments)) == ("bash", ARGS)
    events = list(oai.responses.create(model="m", input="list the files", tools=RESPONSES_TOOLS,
                                       max_output_tokens=40, stream=True))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.type for i in done] == ["reasoning", "message", "function_call"]
    texts = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(texts) == "Let me look." and not any(mk in t for t in texts for mk in MARKUP)


def test_responses_items_sent_back_reuse_the_whole_first_turn(served):
    """The reasoning, message and function_call items sent back with the call's output render back as the
    model wrote them (a `reasoning` item is the next assistant turn's reasoning_content)."""
    oai, _ = served
    user = [{"role": "user", "content": "list the files"}]
    r = oai.responses.create(model="m", input=user, tools=RESPONSES_TOOLS, max_output_tokens=40)
    call = r.output[2]
    turn2 = user + [o.model_dump(exclude_none=True) for o in r.output] + [
        {"type": "function_call_output", "call_id": call.call_id, "output": "a.py"}]
    r2 = oai.responses.create(model="m", input=turn2, tools=RESPONSES_TOOLS, max_output_tokens=4)
    assert r2.usage.input_tokens_details.cached_tokens == r.usage.input_tokens + r.usage.output_tokens
    # without its reasoning item the turn renders otherwise (an empty block): read again from there
    bare = [item for item in turn2 if item.get("type") != "reasoning"]
    r3 = oai.responses.create(model="m", input=bare, tools=RESPONSES_TOOLS, max_output_tokens=4)
    assert r3.usage.input_tokens_details.cached_tokens < r.usage.input_tokens + r.usage.output_tokens


def test_thinking_off_by_chat_template_kwargs(served):
    """`chat_template_kwargs` {"enable_thinking": false} reaches the template: GLM-4.6's prompt then ends with
    an empty `<think></think>` (and its user turns with /nothink), GLM-4.7's with `</think>`; the scripted
    model goes on from there without reasoning, and the turn renders back whole with thinking off too."""
    oai, _ = served
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=40,
                                    extra_body=off)
    m = r.choices[0].message
    assert (getattr(m, "reasoning_content", None), m.content) == (None, "Let me look.")
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [("bash", ARGS)]
    turn2 = MSGS + [m.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": m.tool_calls[0].id,
                                                      "content": "a.py"}]
    r2 = oai.chat.completions.create(model="m", messages=turn2, tools=TOOLS, temperature=0, max_tokens=4,
                                     extra_body=off)
    assert r2.usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


@pytest.mark.parametrize("kwargs", [["enable_thinking"], {"messages": []}, {"add_generation_prompt": False},
                                    {"not a name": 1}, {"self": 1}])   # self: render()'s own argument
def test_bad_chat_template_kwargs_are_named(served, kwargs):
    oai, _ = served
    with pytest.raises(openai.BadRequestError, match="chat_template_kwargs"):
        oai.chat.completions.create(model="m", messages=MSGS, max_tokens=1, extra_body={"chat_template_kwargs": kwargs})


@pytest.mark.parametrize(("cut", "arguments"), [
    (1, '{"command": "ls -la", "timeout": 30'),     # before </tool_call> (the object open: more pairs may follow)
    (2, '{"command": "ls -la"'),                    # after the first value
    (3, ""),                                        # after the name
    (4, None)])                                     # before the call: no call, no markup
def test_a_cut_call_says_length_and_comes_back_as_a_cut_call(served, cut, arguments):
    oai, claude = served
    check_cut_call(oai, claude, MSGS, TOOLS, CLAUDE_TOOLS, RESPONSES_TOOLS, cut, arguments)


def test_no_tools_offered_reasoning_still_apart_and_the_rest_is_text(served):
    oai, _ = served
    r = oai.chat.completions.create(model="m", messages=MSGS, temperature=0, max_tokens=40)
    m = r.choices[0].message
    assert m.reasoning_content == "Need ls." and m.tool_calls is None
    assert m.content.startswith("Let me look.") and m.content.rstrip().endswith("</tool_call>")


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_strata_chat_labels_the_reasoning_and_shows_no_think_tags(tiny_model_factory, name):
    """`strata chat` (ChatSession) split the reasoning as the server does: GLM-4.7-Flash's prompt opens
    `<think>`, and the terminal showed "Need ls.</think>Let me look..." (a lone closing tag); GLM-4.6's answer
    showed both tags."""
    from strata.engine import Engine
    from strata.engine.chat import ChatSession

    chat = ChatSession(Engine(str(glm_model(tiny_model_factory, name)), n_ctx=1024, n_threads=1), max_tokens=40)
    printed: list[str] = []
    assert chat.turn("list the files", on_text=printed.append).stop == "eot"
    shown = "".join(printed)
    assert shown.startswith("[thinking] Need ls.\n[answer] Let me look.") and "think>" not in shown, shown
    assert shown.endswith("</tool_call>")   # calls are the answer's text here: strata chat runs no tools
