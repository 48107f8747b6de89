"""A tool call the length limit cut comes back as the APIs give one back, not as text: OpenAI's
finish_reason "length" with the call's arguments as far as they were written, Anthropic's stop_reason
"max_tokens" with a tool_use block holding the members written whole (what the anthropic SDK reads from
a cut stream), and a cut that came before the tool's name leaves no markup as the answer's text. Before,
`<tool_call>\\n{"name": "get_weather", "arguments": {"city": "Paris` came back as the content.
The reader alone (engine cut_call.py), then live: the default model made to call (tool_choice required /
any) and cut at every length, through the real openai and anthropic SDKs, whole and streamed; and a
tiny scripted model calling on its own (tool_choice auto) after prose."""

from __future__ import annotations

import json

import jiter
import pytest
from strata.engine.cut_call import read_cut_call, whole_members
from strata.server.prompting import PLAIN, AnswerStream, split_answer

from tests.server.live import LiveServer, scripted_model, sdk_clients

OFFERED = {"get_weather"}
ARGS_TEXTS = ['{"city": "Paris", "days": [1, 2.5, -3e2], "unit": {"kind": "c", "ok": true, "none": null}}',
              '{"path": "a \\"b\\" \\u00e9\\n", "lines": [], "opts": {}}']


@pytest.mark.parametrize("text", ARGS_TEXTS)
def test_whole_members_read_a_cut_object_as_the_anthropic_sdk_does(text):
    # every cut of the text, against jiter's partial reading (the anthropic SDK's for a cut tool_use input)
    for n in range(1, len(text) + 1):
        assert whole_members(text[:n]) == jiter.from_json(text[:n].encode(), partial_mode=True), text[:n]
    assert whole_members(text + "\n</tool_call>") == json.loads(text)
    assert whole_members("") == whole_members("[1, 2]") == whole_members("nothing") == {}


CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
HEAD = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "'
IN_A_CUT_STRING = ["see <tool_call>", "see <tool_call> and more", "a <tool_call> b </tool_call> c", "a <TOOLCALL> b",
                   "see <tool", "x <TOOLC"]
EXAMPLE = 'Like this:\n```\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "x</tool_call>\n```\n'
CUT_IN_A_STRING = ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome}}ader compose a function: '
                   '</param></return</button>hereses</tool_call>BAANT')


@pytest.mark.parametrize(("content", "found"), [
    ("<tool_", ("", None)),                                             # the opening tag cut
    ("<", ("", None)),                                                  # ... as the whole answer
    ("a <", None), ("List<T", None),
    ("It is <tool", ("It is", None)),
    ('Let me see.\n<tool_call>\n{"name": "get_wea', ("Let me see.", None)),     # before the name is whole
    ('<tool_call>\n{"name": "get_weather"', ("", {"name": "get_weather", "arguments": ""})),
    ('<tool_call>\n{"name": "get_weather", "argu', ("", {"name": "get_weather", "arguments": ""})),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
     ("", {"name": "get_weather", "arguments": '{"city": "Par'})),
    (CALL[:-3], ("", {"name": "get_weather", "arguments": '{"city": "Paris"}'})),     # only the closing tag cut
    ('<tool_call>\n{"name": "not_offered", "arguments": {"x": 1', ("", None)),
    # a closing tag inside the string the limit cut is the string's (the default model, tool_choice required,
    # seed 32, temperature 1, max_tokens 80: the call came back as the content's text, markup and all)
    (CUT_IN_A_STRING, ("", {"name": "get_weather", "arguments": CUT_IN_A_STRING[CUT_IN_A_STRING.index("{", 20):]})),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "a\\"</tool_call>',
     ("", {"name": "get_weather", "arguments": '{"city": "a\\"</tool_call>'})),
    # an opening tag inside the string the limit cut is the string's too (the call does not end where it
    # opens, whole, cut or of the other spelling): the call block opened first is the one cut
    *[(HEAD + inside, ("", {"name": "get_weather", "arguments": '{"city": "' + inside}))
      for inside in IN_A_CUT_STRING],
    # a backslash at the cut (an escape not written whole): still inside the string
    (HEAD + "a\\", ("", {"name": "get_weather", "arguments": '{"city": "a\\'})),
    # the calls before the cut one are whole (parse_tool_calls took them): what they hold is not the cut call's
    (CALL + "\n" + HEAD + "Ro<tool_call>x", (CALL, {"name": "get_weather", "arguments": '{"city": "Ro<tool_call>x'})),
    (CALL + "\n" + HEAD + "Ro</tool_call>x", (CALL, {"name": "get_weather", "arguments": '{"city": "Ro</tool_call>x'})),
    # a block in a code block is text, whatever its string holds; the call after it is cut
    (EXAMPLE + HEAD + "Ro", (EXAMPLE.rstrip(), {"name": "get_weather", "arguments": '{"city": "Ro'})),
    # a body that is not JSON ends at its first closing tag, quotes and all
    ('<tool_call>\nsay "hi</tool_call>\n' + HEAD + "Ro",
     ('<tool_call>\nsay "hi</tool_call>', {"name": "get_weather", "arguments": '{"city": "Ro'})),
    # not a call block cut: the content as it is
    (HEAD + 'a\\\\"</tool_call>', None),             # the string closed ("a\\"): the tag closes the block
    ("Try this:\n```\n<tool", None),
    ("a < b and List<T", None),
    ("<tool_call>\nsome words", None),
    (CALL, None),
    (CALL + "\nDone.", None),
    ("Try this:\n```\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {", None),   # an example in code
])
def test_read_cut_call(content, found):
    from strata.engine.code_fences import in_code_block

    got = read_cut_call(content, OFFERED, in_code_block)
    if found is None or found[1] is None:
        assert got == found
    else:
        assert got == (found[0], {**found[1], "cut": True})


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def test_a_cut_answer_streamed_reads_as_whole():
    answer = 'Let me look.\n' + CALL[:CALL.index("Paris") + 1]
    whole = split_answer(answer, PLAIN, TOOLS, cut=True)
    assert whole == (None, "Let me look.", [{"name": "get_weather", "arguments": '{"city": "P', "cut": True}])
    for step in (1, 3, 7):
        s = AnswerStream(PLAIN, TOOLS)
        texts = [t for i in range(0, len(answer), step) for k, t in s.feed(answer[i:i + step]) if k == "text"]
        tail, rest, calls = s.finish(answer, cut=True)
        assert ("".join(texts) + "".join(t for _, t in tail) + rest, calls) == whole[1:]
    # not cut (the answer ended there on its own): the text stays the content, as before
    assert split_answer(answer, PLAIN, TOOLS) == (None, answer, [])


def test_a_call_cut_inside_a_string_holding_its_closing_tag_is_a_cut_call_streamed_or_not():
    arguments = CUT_IN_A_STRING[CUT_IN_A_STRING.index("{", 20):]
    assert split_answer(CUT_IN_A_STRING, PLAIN, TOOLS, cut=True) == (
        None, "", [{"name": "get_weather", "arguments": arguments, "cut": True}])
    for step in (1, 5):
        s = AnswerStream(PLAIN, TOOLS)
        texts = [t for i in range(0, len(CUT_IN_A_STRING), step) for k, t in s.feed(CUT_IN_A_STRING[i:i + step])
                 if k == "text"]
        tail, rest, calls = s.finish(CUT_IN_A_STRING, cut=True)
        assert "".join(texts) + "".join(t for _, t in tail) + rest == ""
        assert calls == [{"name": "get_weather", "arguments": arguments, "cut": True}]


@pytest.mark.parametrize("answer", [HEAD + inside for inside in IN_A_CUT_STRING] +
                         [CALL + "\n" + HEAD + "Ro<tool_call>x", CALL + "\n" + HEAD + "Ro</tool_call>x"])
def test_a_call_cut_inside_a_string_holding_an_opening_tag_is_a_cut_call_streamed_or_not(answer):
    # the call's markup never comes back as text: the calls before it whole, then it cut, as far as written
    cut = {"name": "get_weather", "arguments": answer[answer.rindex(HEAD) + len(HEAD) - len('{"city": "'):],
           "cut": True}
    whole = [{"name": "get_weather", "arguments": '{"city": "Paris"}'}] if answer.startswith(CALL) else []
    assert split_answer(answer, PLAIN, TOOLS, cut=True) == (None, "", whole + [cut])
    for step in (1, 4):
        s = AnswerStream(PLAIN, TOOLS)
        texts = [t for i in range(0, len(answer), step) for k, t in s.feed(answer[i:i + step]) if k == "text"]
        tail, rest, calls = s.finish(answer, cut=True)
        assert ("".join(texts) + "".join(t for _, t in tail) + rest, calls) == ("", whole + [cut])


# ----- live: the default model, its call demanded and cut -----

ANTHROPIC_TOOLS = [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def smol(default_model_path):
    with LiveServer(model=str(default_model_path), ctx=1024, batch=1, threads=2, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


def sdk_reads(arguments: str) -> dict:
    """A cut input as the anthropic SDK reads it streamed (nothing written yet: its {})."""
    return jiter.from_json(arguments.encode(), partial_mode=True) if arguments.strip() else {}


def test_live_a_demanded_call_cut_by_max_tokens(smol):
    oai, claude = smol
    full = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                       max_tokens=60, temperature=0)
    whole = full.choices[0].message.tool_calls[0].function.arguments
    n = full.usage.completion_tokens
    assert full.choices[0].finish_reason == "tool_calls" and n > 12
    seen = set()
    for cut in range(1, n):
        r = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                        max_tokens=cut, temperature=0)
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "length" and not m.content, (cut, m)     # no markup as text
        args = m.tool_calls[0].function.arguments if m.tool_calls else None
        if args is not None:
            assert m.tool_calls[0].function.name == "get_weather" and whole.startswith(args), (cut, args)
        streamed = list(oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                                    max_tokens=cut, temperature=0, stream=True))
        deltas = [c.choices[0].delta for c in streamed if c.choices]
        assert not "".join(d.content or "" for d in deltas)
        assert [t.function.arguments for d in deltas for t in d.tool_calls or ()] == ([] if args is None else [args])
        assert streamed[-1].choices[0].finish_reason == "length"
        # Anthropic: stop_reason max_tokens, the members written whole, streamed the same as the SDK reads it
        msg = claude.messages.create(model="m", messages=ASK, tools=ANTHROPIC_TOOLS, tool_choice={"type": "any"},
                                     max_tokens=cut, extra_body={"temperature": 0})
        uses = [(b.name, b.input) for b in msg.content if b.type == "tool_use"]
        texts = [b.text for b in msg.content if b.type == "text"]
        assert msg.stop_reason == "max_tokens" and not "".join(texts)
        want = [] if args is None else [("get_weather", sdk_reads(args))]
        assert uses == want, (cut, args, uses)
        with claude.messages.stream(model="m", messages=ASK, tools=ANTHROPIC_TOOLS, tool_choice={"type": "any"},
                                    max_tokens=cut, extra_body={"temperature": 0}) as stream:
            final = stream.get_final_message()
        assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == want
        assert final.stop_reason == "max_tokens"
        seen.add("call" if args is not None else "none")
        if args is not None and json.loads(whole) == sdk_reads(args):
            seen.add("whole members")
    assert seen == {"call", "none", "whole members"}


# ----- live: a model that calls on its own, after prose (tool_choice auto) -----

PIECES = ("I will read it.", "\n<tool_call>\n", '{"name": "read_file", "arguments": ', '{"path": "a.py"}}',
          "\n</tool_call>")
READ_FILE = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def caller(tiny_model_factory):
    model = scripted_model(tiny_model_factory, "".join(PIECES), ctx_len=2048, n_vocab=512, added_tokens=PIECES)
    with LiveServer(model=str(model), ctx=1024, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


@pytest.mark.parametrize(("max_tokens", "content", "args"), [
    (1, "I will read it.", None), (2, "I will read it.", None), (3, "I will read it.", ""),
    (4, "I will read it.", '{"path": "a.py"}'), (5, "I will read it.", '{"path": "a.py"}'),
    (9, "I will read it.", '{"path": "a.py"}')])
def test_live_a_call_of_its_own_cut_after_prose(caller, max_tokens, content, args):
    oai, claude = caller
    ask = [{"role": "user", "content": "Read a.py"}]
    r = oai.chat.completions.create(model="m", messages=ask, tools=READ_FILE, max_tokens=max_tokens, temperature=0)
    m = r.choices[0].message
    calls = [(t.function.name, t.function.arguments) for t in m.tool_calls or ()]
    assert (m.content, calls) == (content, [] if args is None else [("read_file", args)])
    assert r.choices[0].finish_reason == ("tool_calls" if max_tokens == 9 else "length")
    chunks = list(oai.chat.completions.create(model="m", messages=ask, tools=READ_FILE, max_tokens=max_tokens,
                                              temperature=0, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == content
    assert [(t.function.name, t.function.arguments) for d in deltas for t in d.tool_calls or ()] == calls
    tools = [{"name": "read_file", "input_schema": READ_FILE[0]["function"]["parameters"]}]
    msg = claude.messages.create(model="m", messages=ask, tools=tools, max_tokens=max_tokens,
                                 extra_body={"temperature": 0})
    assert [(b.type, getattr(b, "text", None) or getattr(b, "input", None)) for b in msg.content] == \
        [("text", content)] + ([] if args is None else [("tool_use", json.loads(args) if args else {})])


def test_live_a_demanded_call_cut_on_the_responses_api(smol):
    """Responses: the response is `incomplete` (max_output_tokens) with the call item as far as written,
    status incomplete, the same arguments as chat's, whole and streamed."""
    oai, _ = smol
    tools = [{"type": "function", "name": "get_weather", "parameters": TOOLS[0]["function"]["parameters"]}]
    for cut in (3, 16, 22):
        chat = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                           max_tokens=cut, temperature=0).choices[0].message
        want = [("get_weather", t.function.arguments, "incomplete") for t in chat.tool_calls or ()]
        r = oai.responses.create(model="m", input=ASK[0]["content"], tools=tools, tool_choice="required",
                                 max_output_tokens=cut, temperature=0)
        assert (r.status, r.incomplete_details.reason, r.output_text) == ("incomplete", "max_output_tokens", "")
        assert [(o.name, o.arguments, o.status) for o in r.output if o.type == "function_call"] == want, cut
        events = list(oai.responses.create(model="m", input=ASK[0]["content"], tools=tools, tool_choice="required",
                                           max_output_tokens=cut, temperature=0, stream=True))
        assert events[-1].type == "response.incomplete" and events[-1].response.output_text == ""
        assert [(o.name, o.arguments, o.status) for o in events[-1].response.output if o.type == "function_call"] \
            == want


# ----- Responses: the calls before the cut one were written whole -----

TWO_CALLS = ("I will read both.", "\n<tool_call>\n", '{"name": "read_file", "arguments": ', '{"path": "a.py"}}',
             "\n</tool_call>", " <tool_call>\n", '{"name":"read_file","arguments":', '{"path":"b.py"}}',
             "</tool_call>")   # each piece once: a scripted model's tokens differ


@pytest.fixture(scope="module")
def two_caller(tiny_model_factory):
    model = scripted_model(tiny_model_factory, "".join(TWO_CALLS), ctx_len=2048, n_vocab=512,
                           added_tokens=TWO_CALLS)
    with LiveServer(model=str(model), ctx=1024, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


@pytest.mark.parametrize("max_tokens", [7, 8])   # the second call cut after its name / before its closing tag
def test_live_responses_a_whole_call_before_the_cut_one_is_completed(two_caller, max_tokens):
    """Responses: the answer's first call was written whole before the limit cut the second: it is "completed"
    (an agent runs it), only the cut one "incomplete"; whole and streamed (all were "incomplete")."""
    oai, _ = two_caller
    ask = [{"role": "user", "content": "Read a.py and b.py"}]
    chat = oai.chat.completions.create(model="m", messages=ask, tools=READ_FILE, max_tokens=max_tokens,
                                       temperature=0).choices[0]
    args = [t.function.arguments for t in chat.message.tool_calls]
    assert (chat.finish_reason, args[0], len(args)) == ("length", '{"path": "a.py"}', 2)
    tools = [{"type": "function", "name": "read_file", "parameters": READ_FILE[0]["function"]["parameters"]}]
    want = [("read_file", args[0], "completed"), ("read_file", args[1], "incomplete")]
    r = oai.responses.create(model="m", input="Read a.py and b.py", tools=tools, max_output_tokens=max_tokens,
                             temperature=0)
    assert (r.status, r.output_text) == ("incomplete", "I will read both.")
    assert [(o.name, o.arguments, o.status) for o in r.output if o.type == "function_call"] == want
    events = list(oai.responses.create(model="m", input="Read a.py and b.py", tools=tools,
                                       max_output_tokens=max_tokens, temperature=0, stream=True))
    assert events[-1].type == "response.incomplete"
    assert [(o.name, o.arguments, o.status) for o in events[-1].response.output if o.type == "function_call"] == want
    done = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    assert [(o.arguments, o.status) for o in done] == [(a, s) for _, a, s in want]
