"""Seed-OSS answers read by the shared reader (server/prompting.py split_answer / AnswerStream, engine seed.py):
`<seed:tool_call>` blocks holding `<function=NAME>` and `<parameter=P>V</parameter>` lines, values as written
and typed by the tools' schemas, `<seed:think>` reasoning; whole and streamed in any pieces, the same result
and no markup in the streamed text; cut and malformed calls are text. Expected outputs of the first cases are
llama.cpp's (tests/test-chat.cpp, ByteDance-Seed-OSS)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strata.server.prompting import AnswerFormat, AnswerStream, answer_format, split_answer
from strata.server.reasoning import SEED_TAGS

from tests.server.answer_checks import VocabEngine, streamed


def fn(tool: str, **props) -> dict:
    return {"type": "function", "function": {"name": tool, "parameters": {"type": "object", "properties": props}}}


INT, STR = {"type": "integer"}, {"type": "string"}
TOOLS = [fn("special_function", arg1=INT), fn("special_function_with_opt", arg1=INT, arg2=INT),
         fn("todo_list", todos={"type": "array"}), fn("edit", filename=STR, oldString=STR, newString=STR),
         fn("bash", command=STR, timeout=INT)]
SEED = AnswerFormat(think=SEED_TAGS, seed_calls=True)   # Seed-OSS's vocabulary
OTHER = AnswerFormat()                                  # a vocabulary without <seed:tool_call>
MARKUP = ("<seed:tool_call>", "</seed:tool_call>", "<function=", "<parameter=")


def call(name: str, args: dict) -> dict:
    return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}


def block(name: str, *params: tuple[str, str]) -> str:
    """A call as Seed-OSS's template writes one."""
    return ("<seed:tool_call>\n<function=" + name + ">\n"
            + "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params) + "</function>\n</seed:tool_call>")


OLD, NEW = 'def foo(arg = "14"):\n    return arg + "bar"\n', 'def foo(arg = "15"):\n    pass\n'
TODOS = '[{"item": "Check stuff", "selected": false}, {"item": "Prepare stuff", "selected": true}]'
SCRIPT = 'cat > t.py <<EOF\nif a < b and "<parameter=x>" in s:\n    print("</seed:tool_call>")\nEOF'
ONE = block("special_function", ("arg1", "1"))

# (answer, reasoning, content, calls)
CASES = [
    # llama.cpp's cases
    ("Hello, world!\nWhat's up?", None, "Hello, world!\nWhat's up?", []),
    ("<seed:think>I'm thinking about the answer</seed:think>\nHello, world!", "I'm thinking about the answer",
     "Hello, world!", []),
    (ONE, None, "", [call("special_function", {"arg1": 1})]),
    (ONE + "\n" + block("special_function_with_opt", ("arg1", "1"), ("arg2", "2")), None, "",
     [call("special_function", {"arg1": 1}), call("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    (block("todo_list", ("todos", TODOS)), None, "", [call("todo_list", {"todos": json.loads(TODOS)})]),
    (block("edit", ("filename", "foo.cpp"), ("oldString", OLD), ("newString", NEW)), None, "",
     [call("edit", {"filename": "foo.cpp", "oldString": OLD, "newString": NEW})]),
    # a turn as the template writes it: reasoning, text, calls
    ("<seed:think>Need the listing.</seed:think>\nLet me look.\n\n" + block("bash", ("command", "ls -la"),
     ("timeout", "30")) + "\n" + block("bash", ("command", "pwd")), "Need the listing.", "Let me look.",
     [call("bash", {"command": "ls -la", "timeout": 30}), call("bash", {"command": "pwd"})]),
    # values as written: markup-like text, leading and trailing newlines
    (block("bash", ("command", SCRIPT)), None, "", [call("bash", {"command": SCRIPT})]),
    (block("bash", ("command", "\nls\n")), None, "", [call("bash", {"command": "\nls\n"})]),
    # no parameters; text after the calls is content
    (block("bash") + " then done", None, "then done", [call("bash", {})]),
    # cut by the token limit: the calls before stay calls, the cut one is text
    (ONE + "\n<seed:tool_call>\n<function=bash>\n<parameter=command>pw", None,
     "<seed:tool_call>\n<function=bash>\n<parameter=command>pw", [call("special_function", {"arg1": 1})]),
    ("Let me look.\n" + ONE[:-len("</seed:tool_call>")], None, "Let me look.\n" + ONE[:-len("</seed:tool_call>")],
     []),
    ("Let me look.<seed:tool_call>\n<func", None, "Let me look.<seed:tool_call>\n<func", []),
    ("<seed:tool_call>", None, "<seed:tool_call>", []),
    # malformed: text, never an error
    ("<seed:tool_call>\nbash\n</seed:tool_call>", None, "<seed:tool_call>\nbash\n</seed:tool_call>", []),
    ("<seed:tool_call><function=>\n</function></seed:tool_call>", None,
     "<seed:tool_call><function=>\n</function></seed:tool_call>", []),
    ("<seed:tool_call><function=bash>junk</function></seed:tool_call>", None,
     "<seed:tool_call><function=bash>junk</function></seed:tool_call>", []),
    ("<seed:tool_call><function=bash><parameter=a>1</function></seed:tool_call>", None,
     "<seed:tool_call><function=bash><parameter=a>1</function></seed:tool_call>", []),
    ("<seed:tool_call><function=bash></function>junk</seed:tool_call>", None,
     "<seed:tool_call><function=bash></function>junk</seed:tool_call>", []),
    # an integer parameter whose value is not JSON stays the text written
    (block("bash", ("timeout", "soon")), None, "", [call("bash", {"timeout": "soon"})]),
    # reasoning cut by the limit: all reasoning
    ("<seed:think>still thinking when the limit ca", "still thinking when the limit ca", "", []),
    # thinking budget 0: the prompt closed the reasoning, the answer is text
    ("Hello.", None, "Hello.", []),
]
IDS = [f"case{i}" for i in range(len(CASES))]


@pytest.mark.parametrize(("answer", "reasoning", "content", "calls"), CASES, ids=IDS)
def test_whole_answer(answer, reasoning, content, calls):
    assert split_answer(answer, SEED, TOOLS) == (reasoning, content, calls)


@pytest.mark.parametrize(("answer", "reasoning", "content", "calls"), CASES, ids=IDS)
@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_streamed_in_small_pieces(answer, reasoning, content, calls, size):
    """Every split: inside `<seed:tool_call>`, the name, the tags, the values, the `<seed:think>` tags."""
    got_reasoning, got_content, got_calls, texts = streamed(SEED, TOOLS, answer, list(range(size, len(answer), size)))
    assert (got_reasoning, got_content.strip(), got_calls) == (reasoning, content.strip(), calls)
    if calls:   # a read call's markup never goes out as text
        assert not any(m in "".join(texts) for m in MARKUP)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CASES), st.lists(st.integers(0, 400), max_size=15))
def test_any_pieces_give_the_whole_answer(case, cuts):
    answer, reasoning, content, calls = case
    got = streamed(SEED, TOOLS, answer, cuts)
    assert (got[0], got[1].strip(), got[2]) == (reasoning, content.strip(), calls)


def test_text_before_a_call_goes_out_before_the_call_ends():
    s = AnswerStream(SEED, TOOLS)
    out = s.feed("<seed:think>Hm.</seed:think>\nLet me check the ") + s.feed("files.\n<seed:tool")
    assert out == [("reasoning", "Hm."), ("text", "Let me check the"), ("text", " files.")]   # whitespace held
    assert s.feed("_call>\n<function=bash>\n<parameter=command>ls") == []
    answer = "<seed:think>Hm.</seed:think>\nLet me check the files.\n" + block("bash", ("command", "ls"))
    assert s.finish(answer) == ([], "", [call("bash", {"command": "ls"})])


def test_no_tools_offered_the_answer_is_text():
    assert split_answer(ONE, SEED, None) == (None, ONE, [])


def test_other_models_text_with_seed_markup_is_text_and_streams():
    """Another model's answer that quotes Seed-OSS's format is never read as a call, nor its tags as
    reasoning."""
    answer = "Seed-OSS writes <seed:think>...</seed:think> then " + ONE + " for a call."
    assert split_answer(answer, OTHER, TOOLS) == (None, answer, [])
    s = AnswerStream(OTHER, TOOLS)
    streamed = "".join(t for _, t in s.feed(answer))
    assert streamed + s.finish(answer)[1] == answer and s.finish(answer)[2] == []


def test_seed_format_follows_the_vocabulary():
    seed = {"<seed:think>": 7, "</seed:think>": 8, "<seed:tool_call>": 9}
    fmt = answer_format(VocabEngine(seed, "<seed:bos>assistant\n"), [1, 2])
    assert (fmt.seed_calls, fmt.think, fmt.opened) == (True, SEED_TAGS, False)
    assert answer_format(VocabEngine(seed, "<seed:bos>assistant\n<seed:think>"), [1, 2]).opened
    other = answer_format(VocabEngine({"<think>": 7, "<tool_call>": 9}, "<seed:bos>assistant\n"), [1, 2])
    assert (other.seed_calls, other.think) == (False, ("<think>", "</think>"))
