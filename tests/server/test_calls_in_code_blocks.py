"""A tool call written inside a fenced code block that opened after prose is the answer's text, not a call:
a model explaining tool use ("call it like this: ```<tool_call>{...}</tool_call>```") must not have its
example run by the agent. For each format the shared reader reads (Hermes / Qwen JSON and Nemotron's
<TOOLCALL> blocks, Qwen3-Coder's XML, GLM's, Seed-OSS's, Mistral's [TOOL_CALLS]), whole and streamed in any
pieces (the same content, no call, and the example streams as it comes instead of being held to the end);
a call after the block closes, or in a fence that opens the answer, is still a call; a bare JSON call
(Llama 3, templates without tool support) is one only as the whole answer, fenced or not. The held-call
rules (JSON, key-value, Mistral's, a call's opening) leave a marker in a code block free and hold one after
the block. Then live (scripted tiny models through the openai SDK): the same answer, an example calling a tool
the request does not offer, from a template without tool support (the Hermes format Strata writes into the
system prompt), a Qwen 2.5-style one and Qwen3-Coder's XML one (both held: the example was made to name an
offered tool), whole and streamed, and a demanded call that still comes."""

from __future__ import annotations

import json

import pytest
from strata.server.prompting import AnswerFormat, split_answer

from tests.server.answer_checks import streamed
from tests.server.live import LiveServer, scripted_model, sdk_clients


def fn(name: str, **props) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": props}}}


TOOLS = [fn("read_file", path={"type": "string", "maxLength": 8})]   # short: a demanded call ends soon
ARGS = {"path": "a.py"}
# one call of read_file in each format, and the answer format whose reader reads it
FORMATS = {
    "hermes": ('<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>', AnswerFormat()),
    "nemotron": ('<TOOLCALL>[{"name": "read_file", "arguments": {"path": "a.py"}}]</TOOLCALL>', AnswerFormat()),
    "qwen3-coder": ("<tool_call>\n<function=read_file>\n<parameter=path>\na.py\n</parameter>\n</function>\n</tool_call>",
                    AnswerFormat()),
    "glm": ("<tool_call>read_file\n<arg_key>path</arg_key>\n<arg_value>a.py</arg_value>\n</tool_call>",
            AnswerFormat(glm_calls=True)),
    "seed": ("<seed:tool_call>\n<function=read_file>\n<parameter=path>a.py</parameter>\n</function>\n</seed:tool_call>",
             AnswerFormat(seed_calls=True)),
    "mistral": ('[TOOL_CALLS]read_file[ARGS]{"path": "a.py"}', AnswerFormat(mistral_calls=True)),
}
CUTS = [list(range(1, 400, n)) for n in (1, 3, 7)]


def documented(call: str, fence: str = "```") -> str:
    end = fence.rstrip("abcdefghijklmnopqrstuvwxyz")     # a closing fence has no info string
    return f"To read a file, call the tool:\n\n{fence}\n{call}\n{end}\n\nIt returns the file's text."


def read_both(answer: str, fmt: AnswerFormat) -> list[tuple[str, list[dict]]]:
    """(content, calls) of the whole answer, then of the answer streamed in pieces of 1, 3 and 7 characters."""
    _, content, calls = split_answer(answer, fmt, TOOLS)
    return [(content, calls)] + [streamed(fmt, TOOLS, answer, cuts)[1:3] for cuts in CUTS]


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("fence", ["```", "```json", "```xml", "~~~", "  ````"])
def test_a_call_in_a_code_block_after_prose_is_text(name, fence):
    call, fmt = FORMATS[name]
    answer = documented(call, fence)
    assert read_both(answer, fmt) == [(answer, [])] * 4
    # streamed, the example goes out as it is written: nothing holds it to the answer's end
    _, _, _, texts = streamed(fmt, TOOLS, answer, CUTS[0])
    assert "".join(texts) == answer.rstrip()


@pytest.mark.parametrize("name", FORMATS)
def test_a_call_after_the_block_closes_or_in_a_fence_opening_the_answer_is_a_call(name):
    call, fmt = FORMATS[name]
    after = documented(call) + "\nLet me read it.\n" + call
    for content, calls in read_both(after, fmt):
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("read_file", ARGS)]
        assert content.startswith("To read a file") and content.count(call) == 1
    if name != "mistral":     # Mistral's calls are read only when nothing but calls follows the first
        fenced = f"```\n{call}\n```"
        for _content, calls in read_both(fenced, fmt):
            assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("read_file", ARGS)]


def test_a_block_that_does_not_close_keeps_later_markers_text_and_the_info_string_counts():
    call, fmt = FORMATS["hermes"]
    unclosed = f"Example:\n```python\nprint('x')\n{call}\n{call}"
    assert read_both(unclosed, fmt) == [(unclosed, [])] * 4
    same_line = f"Example:\n```{call}\n```"
    assert read_both(same_line, fmt) == [(same_line, [])] * 4
    # a shorter or different fence does not close the block; inline ``` code does not open one
    longer = f"Example:\n````\n```\n{call}\n~~~\n{call}\n````\nDone."
    assert read_both(longer, fmt) == [(longer, [])] * 4
    inline = f"Use ```code``` here.\n{call}"
    assert all(calls for _, calls in read_both(inline, fmt))


def test_a_bare_json_call_is_a_call_only_as_the_whole_answer():
    bare = '{"name": "read_file", "arguments": {"path": "a.py"}}'
    for answer in (bare, f"```json\n{bare}\n```", f"<|python_tag|>{bare}"):
        assert all(len(calls) == 1 for _, calls in read_both(answer, AnswerFormat())), answer
    explained = f"Call it so:\n```json\n{bare}\n```"
    assert read_both(explained, AnswerFormat()) == [(explained, [])] * 4



CALLING = "I'll read the file.\n\n"      # a model that calls inside a fence (Qwen2.5-Coder's ```xml)


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("fence", ["```", "```xml", "```json", "~~~"])
def test_a_block_of_calls_that_ends_the_answer_is_the_call_and_its_fence_no_content(name, fence):
    """Prose, then a fence holding nothing but the call, and the answer ends (closed or not, a second such
    block right after): the calls, and the content is the prose, whole and streamed; the stream holds the
    block (its fence never goes out as text)."""
    call, fmt = FORMATS[name]
    end = fence[:3]
    tails = [f"{fence}\n{call}\n{end}", f"{fence}\n{call}\n{end}\n\n", f"{fence}\n{call}\n",
             f"{fence}\n{call}\n{end}\n{fence}\n{call}\n{end}"]
    for tail in tails:
        calls = 2 if tail.count(call) == 2 else 1
        for prose in (CALLING, ""):
            answer = prose + tail
            for content, read in read_both(answer, fmt):
                assert [(c["name"], json.loads(c["arguments"])) for c in read] == [("read_file", ARGS)] * calls
                assert content == prose.strip(), answer
            assert "".join(streamed(fmt, TOOLS, answer, CUTS[0])[3]) == prose.strip()


@pytest.mark.parametrize("name", FORMATS)
def test_a_block_that_ends_the_answer_is_text_unless_it_holds_only_calls_of_offered_tools(name):
    call, fmt = FORMATS[name]
    for answer in (CALLING + f"```python\n{call}\n```",                     # another language
                   CALLING + f"```\n{call.replace('read_file', 'my_tool')}\n```",   # a tool not offered
                   CALLING + f"```\n{call}\nThen it returns the text.\n```",       # more than calls
                   CALLING + f"```\nLike this:\n{call}\n```",
                   CALLING + f"```{call}\n```"):                             # on the info string's line
        assert read_both(answer, fmt) == [(answer, [])] * 4, answer
    # an example, then the call: the example stays text, the call is read
    answer = documented(call) + "\nNow I call it:\n```xml\n" + call + "\n```"
    for content, calls in read_both(answer, fmt):
        assert [c["name"] for c in calls] == ["read_file"] and content == documented(call) + "\nNow I call it:"

# ----- the held-call rules: a marker in a code block is not held -----

def held_rules():
    """Each held-call constraint waiting for the calls a model opens, over a vocabulary of single bytes and the
    markers: Hermes JSON (JsonConstraint), Qwen3-Coder XML (KeyedCall), Mistral (JsonArgsCall), a call's
    opening alone (ForcedStart)."""
    from strata.engine.forced_start import ForcedStart
    from strata.engine.json_args_call import MISTRAL, JsonArgsCall
    from strata.engine.json_constraint import JsonConstraint
    from strata.engine.json_schema import compile_call, tool_arguments
    from strata.engine.keyed_call import KeyedCall
    from strata.engine.token_bytes import Vocabulary

    from tests.text.test_held_calls import XML

    vocab = Vocabulary([bytes([b]) for b in range(256)] + [b"<tool_call>", b"[TOOL_CALLS]", b"<eos>"],
                       special_ids=[256, 257, 258])
    params = TOOLS[0]["function"]["parameters"]
    return vocab, {
        "hermes": (b"<tool_call>", JsonConstraint(compile_call([("read_file", params)]), vocab, [258],
                                                  trigger=b"<tool_call>", lead=b"\n")),
        "qwen3-coder": (b"<tool_call>", KeyedCall(XML, [("read_file", ("path",), ())], vocab, [258],
                                                  trigger=b"<tool_call>")),
        "mistral": (b"[TOOL_CALLS]", JsonArgsCall(MISTRAL, [("read_file", tool_arguments(params))], vocab, [258])),
        "opening": (b"<tool_call>", ForcedStart([b"\n<function=read_file"], vocab, after=b"<tool_call>", repeat=True)),
    }


@pytest.mark.parametrize("name", ["hermes", "qwen3-coder", "mistral", "opening"])
def test_a_held_call_rule_leaves_a_marker_in_a_code_block_free_and_holds_one_after_it(name):
    vocab, rules = held_rules()
    marker, rule = rules[name]

    def write(text: bytes) -> None:
        for piece in text.split(marker):
            for b in piece:
                assert rule.allows(b), (text, bytes([b]))
                rule.advance(b)
            if piece is not text.split(marker)[-1]:
                rule.advance(vocab.bytes.index(marker))

    write(b"Call a tool you do not have like this:\n```\n" + marker + b"my_tool(x=1) <any text>")
    assert not rule.active and rule.allows(ord("}"))   # the example is the model's own text
    write(b"\n```\nNow the real one:\n" + marker)
    assert rule.active and not rule.allows(ord("}"))   # held: a call of an offered tool


# ----- live: scripted tiny models through the openai SDK -----

INTRO, OUTRO = "To call a tool of your own:\n\n```", "\n```\n\nIt returns its result."
# the example calls a tool the request does not offer: a held call would have to name an offered one
HERMES_PIECES = (INTRO, "\n<tool_call>\n", '{"name": "my_tool", "arguments": {"x": 1}}', "\n</tool_call>", OUTRO)
XML_PIECES = (INTRO, "\n<tool_call>\n", "<function=my_tool>\n", "<parameter=x>\n1\n</parameter>\n",
              "</function>\n</tool_call>", OUTRO)
MESSAGES = [{"role": "user", "content": "How do I call a tool of my own?"}]


def served(factory, pieces: tuple[str, ...], **shape) -> LiveServer:
    """A live server on a tiny model that answers `pieces` (each one token) to any chat."""
    model = scripted_model(factory, "".join(pieces), ctx_len=2048, n_vocab=512, added_tokens=pieces, **shape)
    return LiveServer(model=str(model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0)


@pytest.fixture(scope="module", params=["chatml", "qwen-like", "qwen3-coder"])
def live(tiny_model_factory, request):
    """ChatML, a template without tool support (Strata writes the tools and the Hermes call format into the
    system prompt: the answer is free); a Qwen 2.5-style template and Qwen3-Coder's XML one, whose calls the
    model opens are held to the offered tools."""
    from tests.text.test_chat_template import QWEN_LIKE
    from tests.text.test_xml_tool_template import XML_TEMPLATE

    pieces, shape = {"chatml": (HERMES_PIECES, dict(seed=9)),
                     "qwen-like": (HERMES_PIECES, dict(seed=9, chat_template=QWEN_LIKE)),
                     "qwen3-coder": (XML_PIECES, dict(seed=4, chat_template=XML_TEMPLATE))}[request.param]
    with served(tiny_model_factory, pieces, **shape) as s:
        yield sdk_clients(s), "".join(pieces)


def test_live_a_call_in_a_code_block_is_text_and_a_demanded_call_still_comes(live):
    (client, claude), answer = live
    r = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=0, max_tokens=40)
    m = r.choices[0].message
    assert (m.content, m.tool_calls, r.choices[0].finish_reason) == (answer, None, "stop")
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=0,
                                                 max_tokens=40, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == answer
    assert not any(d.tool_calls for d in deltas)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    # tool_choice "required": the answer is a call of the tool, whatever the model would have written
    r = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=0, max_tokens=200,
                                       tool_choice="required")
    assert r.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["read_file"]
    # the Anthropic API reads the answer the same way: one text block, no tool_use
    tools = [{"name": "read_file", "input_schema": TOOLS[0]["function"]["parameters"]}]
    m = claude.messages.create(model="m", max_tokens=40, messages=MESSAGES, tools=tools,
                               extra_body={"temperature": 0})
    assert ([(b.type, b.text) for b in m.content], m.stop_reason) == ([("text", answer)], "end_turn")


FENCED_CALL_PIECES = ("I'll read the file.\n\n```xml", "\n<tool_call>\n", '{"name": "read_file", "arguments": ',
                      '{"path": "a.py"}}', "\n</tool_call>", "\n```")


@pytest.fixture(scope="module")
def fenced_caller(tiny_model_factory):
    """A Qwen 2.5-style template (the calls a model opens are held) whose model calls inside a ```xml fence
    after a sentence, as Qwen2.5-Coder does."""
    from tests.text.test_chat_template import QWEN_LIKE

    with served(tiny_model_factory, FENCED_CALL_PIECES, seed=9, chat_template=QWEN_LIKE) as s:
        yield sdk_clients(s)


def test_live_a_call_in_a_fence_that_ends_the_answer_is_a_call(fenced_caller):
    client, claude = fenced_caller
    ask = [{"role": "user", "content": "Read a.py"}]
    for one in (None, False):       # parallel calls off: the block's call ends the answer all the same
        r = client.chat.completions.create(model="m", messages=ask, tools=TOOLS, temperature=0, max_tokens=60,
                                           **({} if one is None else {"parallel_tool_calls": one}))
        m = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls" and m.content == "I'll read the file."
        assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [("read_file", ARGS)]
    chunks = list(client.chat.completions.create(model="m", messages=ask, tools=TOOLS, temperature=0,
                                                 max_tokens=60, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == "I'll read the file."     # the fence never went out
    assert [t.function.name for d in deltas for t in d.tool_calls or () if t.function.name] == ["read_file"]
    tools = [{"name": "read_file", "input_schema": TOOLS[0]["function"]["parameters"]}]
    m = claude.messages.create(model="m", max_tokens=60, messages=ask, tools=tools, extra_body={"temperature": 0})
    assert [(b.type, getattr(b, "text", None) or getattr(b, "input", None)) for b in m.content] == \
        [("text", "I'll read the file."), ("tool_use", ARGS)]
    assert m.stop_reason == "tool_use"


@pytest.mark.parametrize("name", FORMATS)
def test_parallel_calls_off_never_ends_the_answer_in_an_example(name):
    """With one call at most (parallel calls off) generation ends once a call is whole (one_call.FirstCallEnd):
    never at an example's call, though its block, unclosed so far, may still turn out to end the answer;
    at a call after the block, yes."""
    from dataclasses import replace

    from strata.server.one_call import FirstCallEnd

    call, fmt = FORMATS[name]
    answer = documented(call) + "\nLet me read it.\n" + call
    end = FirstCallEnd(replace(fmt, one_call=True), TOOLS)
    fed = next((i for i in range(len(answer)) if end.feed(answer[i])), None)
    assert fed is not None and fed >= answer.index("Let me read it."), answer[:(fed or 0) + 1]
