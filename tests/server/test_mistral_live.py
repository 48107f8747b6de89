"""Mistral agent turns end to end, through the real `openai` and `anthropic` SDKs and the Responses API, on
scripted tiny models (tests/fixtures/tiny_gguf.py `script`: real weights, known output) with Mistral's real
templates (tests/fixtures/):

- Ministral 3 Reasoning's template, the model answering `[THINK]Need a.py.[/THINK]Reading it.[TOOL_CALLS]
  read_file[ARGS]{"path": "a.py"}`: reasoning, text and the call come out apart in each API, streamed and
  not, with no markup; the call and the reasoning go back and the second turn reuses all of the first;
  a cut call says "length" / "max_tokens" / incomplete and comes back as a cut call, its markup not as text.
- Mistral Small 3.2's and Nemo's templates, the model writing its own id (`[TOOL_CALLS]read_file[CALL_ID]
  abcDEF123[ARGS]{...}`, `[TOOL_CALLS][{"name": ..., "arguments": ..., "id": "abcDEF123"}]`): each API hands
  that id out and the second turn reuses all of the first.

The markup words are added tokens (USER_DEFINED in tiny_gguf, CONTROL in real files: both are parsed in
prompts and decoded as text); the vocabulary uses the "tekken" pre-tokenizer."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from tests.server.live import LiveServer, check_cut_call, sdk_clients

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MINISTRAL3 = (FIXTURES / "mistralai-Ministral-3-14B-Reasoning-2512.jinja").read_text(encoding="utf-8")
SMALL32 = (FIXTURES / "Mistral-Small-3.2-24B-Instruct-2506.jinja").read_text(encoding="utf-8")
NEMO = (FIXTURES / "mistralai-Mistral-Nemo-Instruct-2407.jinja").read_text(encoding="utf-8")
MARKUP = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]")

THINKING = ("[THINK]", "Need a.py.", "[/THINK]", "Reading it.", "[TOOL_CALLS]", "read_file", "[ARGS]",
            '{"path": "a.py"}')
WITH_ID = ("[TOOL_CALLS]", "read_file", "[CALL_ID]", "abcDEF123", "[ARGS]", '{"path": "a.py"}')
NEMO_CALL = ("[TOOL_CALLS]", '[{"name": "read_file", "arguments": {"path": "a.py"}, "id": "abcDEF123"}]')
# Nemo's list of two calls, cut in the second (each piece one token: test_nemos_list_cut_in_its_second_call)
NEMO_TWO = ("[TOOL_CALLS]", '[{"name": "read_file", "arguments": {"path": "a.py"}, "id": "abcDEF123"}, ',
            '{"name": "read_file", "arguments": {"path": "b', '.py"}, "id": "xyzXYZ789"}]')
# a whole call, text, then a call the limit cuts (test_a_cut_call_after_text_after_a_whole_call_is_text)
# (a script's tokens are all different: the second call's markup is one added token, decoded as its text)
AFTER_TEXT = ("[TOOL_CALLS]", "read_file", "[ARGS]", '{"path": "a.py"}', " Then this:",
              '[TOOL_CALLS]read_file[ARGS]{"path": "b', '.py"}')
ADDED = ("[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
         "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CONTENT]", *THINKING, "[CALL_ID]", "abcDEF123", NEMO_CALL[1])
PARAMS = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": PARAMS}}]
CLAUDE_TOOLS = [{"name": "read_file", "description": "Read a file.", "input_schema": PARAMS}]
RESPONSES_TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file.", "parameters": PARAMS}]
MSGS = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "show a.py"}]


def mistral_model(factory, template: str, pieces: tuple[str, ...], added: tuple[str, ...] = ()):
    """A tiny model that answers `pieces` (then its end-of-turn token) to any prompt ending in `[/INST]`,
    as Mistral's templates end every prompt (`added`: more added tokens, so that each piece is one)."""
    from strata.engine import Engine

    shape = dict(ctx_len=4096, n_vocab=512, seed=5, tokenizer_pre="tekken", added_tokens=ADDED + tuple(added),
                 chat_template=template)
    probe = Engine(str(factory(**shape)), n_ctx=64, n_threads=1)
    ids = probe.tokenize("[/INST]" + "".join(pieces), special=True)
    assert len(ids) == len(pieces) + 1, "each piece must be one token"
    return factory(**shape, script=(*ids, probe.tokenizer.eos_id))


@contextlib.contextmanager
def mistral_server(factory, template: str, pieces: tuple[str, ...], added: tuple[str, ...] = ()):
    """A live server (the solo path, no conversation cache) on mistral_model's scripted model."""
    model = mistral_model(factory, template, pieces, added)
    with LiveServer(model=str(model), ctx=4096, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield s


@pytest.fixture(scope="module")
def thinking(tiny_model_factory):
    with mistral_server(tiny_model_factory, MINISTRAL3, THINKING) as s:
        yield sdk_clients(s)


@pytest.fixture(scope="module", params=["small32", "nemo"])
def with_id(tiny_model_factory, request):
    template, pieces = {"small32": (SMALL32, WITH_ID), "nemo": (NEMO, NEMO_CALL)}[request.param]
    # Nemo's template writes the system prompt into the last message when that is a user's, and drops it
    # otherwise: a turn after a tool result has a different prefix whatever Strata does, so no system here
    msgs = MSGS if request.param == "small32" else MSGS[1:]
    with mistral_server(tiny_model_factory, template, pieces) as s:
        yield (*sdk_clients(s), msgs)


def test_openai_reasoning_text_and_call_then_the_whole_first_turn_reused(thinking):
    oai, _ = thinking
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=40)
    m = r.choices[0].message
    assert (m.reasoning_content, m.content, r.choices[0].finish_reason) == ("Need a.py.", "Reading it.", "tool_calls")
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [("read_file",
                                                                                           {"path": "a.py"})]
    turn2 = MSGS + [m.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "print(1)"}]
    r2 = oai.chat.completions.create(model="m", messages=turn2, tools=TOOLS, temperature=0, max_tokens=4)
    # the template writes the reasoning, text and call back as the model wrote them: nothing is read again
    assert r2.usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens + r.usage.completion_tokens

    chunks = list(oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=40,
                                              stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "Need a.py."
    assert "".join(d.content or "" for d in deltas) == "Reading it."
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert [(tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [("read_file", {"path": "a.py"})]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_anthropic_thinking_text_and_tool_use_then_reused(thinking):
    _, claude = thinking
    user = MSGS[1:]
    kw = dict(model="m", max_tokens=40, system="You are a coding agent.", tools=CLAUDE_TOOLS,
              extra_body={"temperature": 0})
    m = claude.messages.create(messages=user, **kw)
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use"] and m.stop_reason == "tool_use"
    assert (m.content[0].thinking, m.content[1].text) == ("Need a.py.", "Reading it.")
    assert (m.content[2].name, m.content[2].input) == ("read_file", {"path": "a.py"})
    turn2 = user + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": m.content[2].id,
                                                  "content": "print(1)"}]}]
    m2 = claude.messages.create(messages=turn2, **{**kw, "max_tokens": 4})
    assert m2.usage.cache_read_input_tokens == m.usage.input_tokens + m.usage.cache_read_input_tokens + \
        m.usage.output_tokens
    with claude.messages.stream(messages=user, **kw) as s:
        events = list(s)
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[2].input == {"path": "a.py"}
    texts = [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
    assert "".join(texts) == "Reading it."


def test_responses_reasoning_message_and_function_call(thinking):
    oai, _ = thinking
    r = oai.responses.create(model="m", input="show a.py", tools=RESPONSES_TOOLS, max_output_tokens=40)
    assert [o.type for o in r.output] == ["reasoning", "message", "function_call"] and r.status == "completed"
    assert r.output[0].content[0].text == "Need a.py." and r.output[1].content[0].text == "Reading it."
    assert (r.output[2].name, json.loads(r.output[2].arguments)) == ("read_file", {"path": "a.py"})
    events = list(oai.responses.create(model="m", input="show a.py", tools=RESPONSES_TOOLS, max_output_tokens=40,
                                       stream=True))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.type for i in done] == ["reasoning", "message", "function_call"]
    texts = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(texts) == "Reading it." and not any(mk in t for t in texts for mk in MARKUP)


@pytest.mark.parametrize(("max_tokens", "called"), [(5, False), (6, True), (7, True)])  # cut after [TOOL_CALLS],
def test_a_cut_call_says_length_and_comes_back_as_a_cut_call(thinking, max_tokens, called):   # the name, [ARGS]
    """A call the limit cut comes back as the APIs give one (test_cut_calls_mistral.py): its name written, a
    call with the arguments as far as written ("" here: none yet); before that no call; never the markup
    as text (it was: "Reading it.[TOOL_CALLS]read_file")."""
    oai, claude = thinking
    check_cut_call(oai, claude, MSGS, TOOLS, CLAUDE_TOOLS, RESPONSES_TOOLS, None, "" if called else None,
                   max_tokens=max_tokens, text="Reading it.")


def test_no_tools_offered_reasoning_still_apart_and_the_rest_is_text(thinking):
    oai, _ = thinking
    r = oai.chat.completions.create(model="m", messages=MSGS, temperature=0, max_tokens=40)
    m = r.choices[0].message
    assert m.reasoning_content == "Need a.py." and m.tool_calls is None
    assert m.content == 'Reading it.[TOOL_CALLS]read_file[ARGS]{"path": "a.py"}'


def test_the_models_own_call_id_is_handed_out_and_the_turn_reused(with_id):
    oai, claude, msgs = with_id
    r = oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS, temperature=0, max_tokens=40)
    m = r.choices[0].message
    assert [(c.id, c.function.name) for c in m.tool_calls] == [("abcDEF123", "read_file")] and m.content is None
    turn2 = msgs + [m.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": "abcDEF123", "content": "print(1)"}]
    r2 = oai.chat.completions.create(model="m", messages=turn2, tools=TOOLS, temperature=0, max_tokens=4)
    assert r2.usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    mc = claude.messages.create(model="m", max_tokens=40, messages=msgs[-1:], tools=CLAUDE_TOOLS)
    assert [(b.type, b.id) for b in mc.content] == [("tool_use", "abcDEF123")]
    rr = oai.responses.create(model="m", input="show a.py", tools=RESPONSES_TOOLS, max_output_tokens=40)
    assert [(o.type, o.call_id, o.id) for o in rr.output] == [("function_call", "abcDEF123", "fc_abcDEF123")]
    # Claude Code's shape: the tool result with text beside it (a tool message, then a user message)
    turn2_claude = msgs[-1:] + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in mc.content]},
                                {"role": "user", "content": [
                                    {"type": "tool_result", "tool_use_id": "abcDEF123", "content": "print(1)"},
                                    {"type": "text", "text": "<system-reminder>be brief</system-reminder>"}]}]
    m2 = claude.messages.create(model="m", max_tokens=4, messages=turn2_claude, tools=CLAUDE_TOOLS)
    # the joined result renders after the whole first turn: all of it reused (> 0 passed on a system
    # prompt's reuse alone)
    assert m2.usage.cache_read_input_tokens == mc.usage.input_tokens + (mc.usage.cache_read_input_tokens or 0) + \
        mc.usage.output_tokens
    # an agent's own ids (another server's, or ours from another model) are mapped so the template renders
    turn2[-2]["tool_calls"][0]["id"] = turn2[-1]["tool_call_id"] = "call_9f8e7d6c5b4a39281706f5e4"
    r3 = oai.chat.completions.create(model="m", messages=turn2, tools=TOOLS, temperature=0, max_tokens=4)
    assert r3.usage.prompt_tokens > r.usage.prompt_tokens + r.usage.completion_tokens    # rendered, no 400


def test_an_id_the_model_copies_from_the_conversation_is_not_handed_out_again(with_id):
    """The scripted model writes abcDEF123 on every turn, as a model may copy an earlier call's id: on a
    later turn of a conversation holding that call the APIs hand out a new id (Anthropic refuses repeated
    tool_use ids)."""
    oai, claude, msgs = with_id
    first = {"id": "abcDEF123", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
    turn2 = msgs + [{"role": "assistant", "content": None, "tool_calls": [first]},
                    {"role": "tool", "tool_call_id": "abcDEF123", "content": "print(1)"},
                    {"role": "assistant", "content": "It prints 1."}, {"role": "user", "content": "again"}]
    r = oai.chat.completions.create(model="m", messages=turn2, tools=TOOLS, temperature=0, max_tokens=40)
    assert [c.id.startswith("call_") for c in r.choices[0].message.tool_calls] == [True]
    claude_turn2 = msgs[-1:] + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "abcDEF123", "name": "read_file",
                                           "input": {"path": "a.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "abcDEF123", "content": "print(1)"}]},
        {"role": "assistant", "content": "It prints 1."}, {"role": "user", "content": "again"}]
    with claude.messages.stream(model="m", max_tokens=40, messages=claude_turn2, tools=CLAUDE_TOOLS) as s:
        final = s.get_final_message()
    assert [b.id.startswith("toolu_") for b in final.content if b.type == "tool_use"] == [True]


def test_a_cut_call_with_the_models_own_id_or_nemos_list(with_id):
    """Cut by the limit, Small 3.2's `[TOOL_CALLS]read_file[CALL_ID]abcDEF123[ARGS]` and Nemo's `[TOOL_CALLS]`
    (its list one token here) come back as cut calls or none, never as markup text; the id is the model's
    once it was written whole (as a whole call's: it was a new one), a new one before that."""
    oai, claude, msgs = with_id
    n = oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS, temperature=0,
                                   max_tokens=40).usage.completion_tokens      # Small 3.2: 6 pieces, Nemo 2
    for max_tokens in range(1, n):      # after [TOOL_CALLS], the name, [CALL_ID], the id, [ARGS]
        want = [] if max_tokens == 1 else [("read_file", "")]
        own = max_tokens >= 4           # Small 3.2's id written (its 4th piece; Nemo's list never gets there)
        r = oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS, temperature=0, max_tokens=max_tokens)
        c = r.choices[0]
        assert (c.finish_reason, c.message.content or "") == ("length", ""), max_tokens
        assert [(t.function.name, t.function.arguments) for t in c.message.tool_calls or ()] == want
        assert [t.id == "abcDEF123" if own else t.id.startswith("call_") for t in c.message.tool_calls or ()] == \
            [True] * len(want), max_tokens
        chunks = list(oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS, temperature=0,
                                                  max_tokens=max_tokens, stream=True))
        ids = [t.id for ch in chunks if ch.choices for t in ch.choices[0].delta.tool_calls or () if t.id]
        assert ids == [t.id for t in c.message.tool_calls or ()] if own else len(ids) == len(want)
        with claude.messages.stream(model="m", max_tokens=max_tokens, messages=msgs[-1:], tools=CLAUDE_TOOLS) as s:
            final = s.get_final_message()
        assert final.stop_reason == "max_tokens"
        assert [(b.type, getattr(b, "name", None)) for b in final.content if b.type != "text" or b.text] == \
            [("tool_use", n) for n, _ in want]
        assert [b.id == "abcDEF123" if own else b.id.startswith("toolu_") for b in final.content
                if b.type == "tool_use"] == [True] * len(want)
        rr = oai.responses.create(model="m", input="show a.py", tools=RESPONSES_TOOLS, max_output_tokens=max_tokens)
        assert [(o.call_id == "abcDEF123") == own for o in rr.output if o.type == "function_call"] == \
            [True] * len(want)


@pytest.fixture(scope="module")
def nemo_two(tiny_model_factory):
    with mistral_server(tiny_model_factory, NEMO, NEMO_TWO, NEMO_TWO[1:]) as s:
        yield sdk_clients(s)


def test_nemos_list_cut_in_its_second_call_gives_the_first_whole_and_the_second_cut(nemo_two):
    """Nemo's `[TOOL_CALLS][{...}, {"name": "read_file", "arguments": {"path": "b` (max_tokens 3): the first
    call whole with the model's id, the second cut (was: all of it the content, markup and all), in every
    API whole and streamed: OpenAI's arguments as written, Anthropic's input the members written whole (the
    SDK's partial reading), Responses' first call completed and the cut one incomplete."""
    import jiter

    oai, claude = nemo_two
    msgs = MSGS[1:]          # Nemo's template: no system (see with_id)
    want = [("read_file", '{"path": "a.py"}'), ("read_file", '{"path": "b')]
    r = oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS, temperature=0, max_tokens=3)
    c = r.choices[0]
    assert (c.finish_reason, c.message.content) == ("length", None)
    assert [(t.function.name, t.function.arguments) for t in c.message.tool_calls] == want
    assert [t.id for t in c.message.tool_calls][0] == "abcDEF123"
    chunks = list(oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS, temperature=0, max_tokens=3,
                                              stream=True))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    assert "".join(d.content or "" for d in deltas) == ""
    assert [(t.function.name, t.function.arguments) for d in deltas for t in d.tool_calls or ()] == want
    assert chunks[-1].choices[0].finish_reason == "length"
    uses = [("read_file", {"path": "a.py"}), ("read_file", jiter.from_json(b'{"path": "b', partial_mode=True))]
    m = claude.messages.create(model="m", max_tokens=3, messages=msgs, tools=CLAUDE_TOOLS)
    with claude.messages.stream(model="m", max_tokens=3, messages=msgs, tools=CLAUDE_TOOLS) as st:
        final = st.get_final_message()
    for msg in (m, final):
        assert msg.stop_reason == "max_tokens"
        assert [(b.name, b.input) for b in msg.content if b.type == "tool_use"] == uses
        assert msg.content[0].id == "abcDEF123" and not [b for b in msg.content if b.type == "text" and b.text]
    rr = oai.responses.create(model="m", input="show a.py", tools=RESPONSES_TOOLS, max_output_tokens=3)
    assert rr.status == "incomplete" and rr.output_text == ""
    assert [(o.name, o.arguments, o.status) for o in rr.output if o.type == "function_call"] == \
        [(*want[0], "completed"), (*want[1], "incomplete")]
    # not cut: both calls whole, each with the model's id
    r = oai.chat.completions.create(model="m", messages=msgs, tools=TOOLS, temperature=0, max_tokens=40)
    assert [(t.id, t.function.arguments) for t in r.choices[0].message.tool_calls] == \
        [("abcDEF123", '{"path": "a.py"}'), ("xyzXYZ789", '{"path": "b.py"}')]


@pytest.fixture(scope="module")
def after_text(tiny_model_factory):
    with mistral_server(tiny_model_factory, MINISTRAL3, AFTER_TEXT, AFTER_TEXT[4:]) as s:
        yield sdk_clients(s)


def test_a_cut_call_after_text_after_a_whole_call_is_text(after_text):
    """`[TOOL_CALLS]read_file[ARGS]{...} Then this:[TOOL_CALLS]read_file[ARGS]{"path": "b` (max_tokens 6): the
    first call and the rest as text, as the whole answer gives them (a call after text that follows whole
    calls is text: test_cut_calls_after_text.py); it gave a cut call of b and the content "Then this:"."""
    oai, claude = after_text
    text = 'Then this:[TOOL_CALLS]read_file[ARGS]{"path": "b'
    whole = [("read_file", '{"path": "a.py"}')]
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=40)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (text + '.py"}', "tool_calls")
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=6)
    c = r.choices[0]
    assert (c.finish_reason, c.message.content) == ("length", text)
    assert [(t.function.name, t.function.arguments) for t in c.message.tool_calls] == whole
    chunks = list(oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=6,
                                              stream=True))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    assert "".join(d.content or "" for d in deltas) == text
    assert [(t.function.name, t.function.arguments) for d in deltas for t in d.tool_calls or ()] == whole
    m = claude.messages.create(model="m", max_tokens=6, messages=MSGS[1:], tools=CLAUDE_TOOLS)
    with claude.messages.stream(model="m", max_tokens=6, messages=MSGS[1:], tools=CLAUDE_TOOLS) as st:
        final = st.get_final_message()
    for msg in (m, final):
        assert msg.stop_reason == "max_tokens"
        assert [(b.type, b.text if b.type == "text" else (b.name, b.input)) for b in msg.content] == \
            [("text", text), ("tool_use", ("read_file", {"path": "a.py"}))]
    rr = oai.responses.create(model="m", input="show a.py", tools=RESPONSES_TOOLS, max_output_tokens=6)
    assert (rr.status, rr.output_text) == ("incomplete", text)
    assert [(o.name, o.arguments) for o in rr.output if o.type == "function_call"] == whole
