"""GLM answers read by the shared reader (server/prompting.py split_answer / AnswerStream, engine glm.py):
`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>` calls with GLM-4.5 / 4.6's
newlines and GLM-4.7's none, values typed by the tools' schemas, `<think>` reasoning (GLM-4.6's answer starts
with it; GLM-4.7's prompt opens it); whole and streamed in any pieces, the same result and no markup in the
streamed text. Expected outputs of the first cases are llama.cpp's (tests/test-chat.cpp: GLM-4.6,
GLM-4.7-Flash, the tagged-arguments cases of Spark2.5 that use the same format)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strata.server.prompting import AnswerFormat, AnswerStream, answer_format, split_answer

from tests.server.answer_checks import VocabEngine, streamed


def fn(tool: str, **props) -> dict:
    return {"type": "function", "function": {"name": tool, "parameters": {"type": "object", "properties": props}}}


INT, STR = {"type": "integer"}, {"type": "string"}
TOOLS = [fn("special_function", arg1=INT), fn("special_function_with_opt", arg1=INT, arg2=INT),
         fn("magic_int", ref=INT, name=STR), fn("amount", orig={"type": "number"}),
         fn("toggle", enabled={"type": "boolean"}), fn("set_config", config={"type": "object"}),
         fn("nested_args", tags={"type": "array"}, entries={"type": "array"}), fn("empty_args"),
         fn("read_file_diff_md", review_id=STR, file_id=STR),
         fn("bash", command=STR, timeout=INT), fn("write_file", path=STR, content=STR)]
PLAIN = AnswerFormat(glm_calls=True)                 # GLM-4.6: the answer starts with "\n<think>"
OPENED = AnswerFormat(opened=True, glm_calls=True)   # GLM-4.7: the prompt ends with "<think>"
OTHER = AnswerFormat()                               # a vocabulary without GLM's <arg_key> token
MARKUP = ("<tool_call>", "</tool_call>", "<arg_key>", "<arg_value>")


def call(name: str, args: dict) -> dict:
    return {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}


GLM47_SIX = ("Preparing updates."
             "<tool_call>magic_int<arg_key>ref</arg_key><arg_value>42</arg_value>"
             "<arg_key>name</arg_key><arg_value>上海</arg_value></tool_call>"
             "<tool_call>amount<arg_key>orig</arg_key><arg_value>2.5</arg_value></tool_call>"
             "<tool_call>toggle<arg_key>enabled</arg_key><arg_value>true</arg_value></tool_call>"
             "<tool_call>set_config<arg_key>config</arg_key>"
             '<arg_value>{"source": "spark", "options": {"strict": true}}</arg_value></tool_call>'
             "<tool_call>nested_args<arg_key>tags</arg_key><arg_value>[\"alpha\", \"测试\"]</arg_value>"
             '<arg_key>entries</arg_key><arg_value>[{"id": 1, "label": "first"}, {"id": 2, "label": "第二"}]'
             "</arg_value></tool_call><tool_call>empty_args</tool_call>")
SCRIPT = 'cat > t.py <<EOF\nif a < b and "<arg_value>" in s:\n    print("</tool_call>")\nEOF'

# (format, answer, reasoning, content, calls)
CASES = [
    # llama.cpp's cases
    (PLAIN, "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
     None, "", [call("special_function", {"arg1": 1})]),
    (PLAIN, "Hello, world!\nWhat's up?", None, "Hello, world!\nWhat's up?", []),
    (OPENED, "I'm\nthinking</think>Hello, world!\nWhat's up?", "I'm\nthinking", "Hello, world!\nWhat's up?", []),
    (PLAIN, "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>",
     None, "", [call("special_function", {"arg1": 1})]),
    (OPENED, "I'm\nthinking</think><tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value>"
     "</tool_call>", "I'm\nthinking", "", [call("special_function", {"arg1": 1})]),
    (PLAIN, "<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>"
     "<tool_call>special_function_with_opt<arg_key>arg1</arg_key><arg_value>1</arg_value>"
     "<arg_key>arg2</arg_key><arg_value>2</arg_value></tool_call>", None, "",
     [call("special_function", {"arg1": 1}), call("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    (OPENED, "Let me read the diff content.</think><tool_call>read_file_diff_md</tool_call>",
     "Let me read the diff content.", "", [call("read_file_diff_md", {})]),
    (PLAIN, GLM47_SIX, None, "Preparing updates.",
     [call("magic_int", {"ref": 42, "name": "上海"}), call("amount", {"orig": 2.5}), call("toggle", {"enabled": True}),
      call("set_config", {"config": {"source": "spark", "options": {"strict": True}}}),
      call("nested_args", {"tags": ["alpha", "测试"], "entries": [{"id": 1, "label": "first"},
                                                                  {"id": 2, "label": "第二"}]}),
      call("empty_args", {})]),
    # GLM-4.6 as its template writes a turn: "\n<think>...</think>\ntext\n<tool_call>..."
    (PLAIN, "\n<think>Need the listing.</think>\nLet me look.\n<tool_call>bash\n<arg_key>command</arg_key>\n"
     "<arg_value>ls -la</arg_value>\n<arg_key>timeout</arg_key>\n<arg_value>30</arg_value>\n</tool_call>\n"
     "<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>pwd</arg_value>\n</tool_call>",
     "Need the listing.", "Let me look.",
     [call("bash", {"command": "ls -la", "timeout": 30}), call("bash", {"command": "pwd"})]),
    (PLAIN, "\n<think></think>\nDone.", "", "Done.", []),
    # values as written: markup-like text, newlines, JSON in a string parameter, a number in a string one
    (PLAIN, f"<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>{SCRIPT}</arg_value>\n</tool_call>",
     None, "", [call("bash", {"command": SCRIPT})]),
    (PLAIN, '<tool_call>write_file<arg_key>path</arg_key><arg_value>007</arg_value><arg_key>content</arg_key>'
     '<arg_value>\n{"a": [1, 2]}\n</arg_value></tool_call>', None, "",
     [call("write_file", {"path": "007", "content": '\n{"a": [1, 2]}\n'})]),
    # a parameter no schema names: JSON values read, anything else a string
    (PLAIN, "<tool_call>bash<arg_key>extra</arg_key><arg_value>[1, 2]</arg_value><arg_key>note</arg_key>"
     "<arg_value>hi there</arg_value></tool_call>", None, "", [call("bash", {"extra": [1, 2], "note": "hi there"})]),
    # an integer parameter whose value is not JSON stays the text written (never NaN: not JSON)
    (PLAIN, "<tool_call>bash<arg_key>timeout</arg_key><arg_value>NaN</arg_value></tool_call>", None, "",
     [call("bash", {"timeout": "NaN"})]),
    # ... nor one past a double (json.loads reads 1e999 as inf, json.dumps writes Infinity)
    (PLAIN, "<tool_call>bash<arg_key>timeout</arg_key><arg_value>1e999</arg_value></tool_call>", None, "",
     [call("bash", {"timeout": "1e999"})]),
    # text after the calls is kept as content
    (PLAIN, "<tool_call>bash<arg_key>command</arg_key><arg_value>ls</arg_value></tool_call> then done", None,
     "then done", [call("bash", {"command": "ls"})]),
    # cut by the token limit: the calls before stay calls, the cut one is text
    (PLAIN, "<tool_call>bash<arg_key>command</arg_key><arg_value>ls</arg_value></tool_call>"
     "<tool_call>bash<arg_key>command</arg_key><arg_value>pw", None,
     "<tool_call>bash<arg_key>command</arg_key><arg_value>pw", [call("bash", {"command": "ls"})]),
    (PLAIN, "Let me look.\n<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>\n", None,
     "Let me look.\n<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>\n", []),
    (PLAIN, "Let me look.<tool_call>ba", None, "Let me look.<tool_call>ba", []),
    (PLAIN, "<tool_call>", None, "<tool_call>", []),
    # malformed: text, never an error
    (PLAIN, "<tool_call>two words<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>", None,
     "<tool_call>two words<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>", []),
    (PLAIN, "<tool_call>bash<arg_key>a</arg_key>1</tool_call>", None, "<tool_call>bash<arg_key>a</arg_key>1</tool_call>",
     []),
    (PLAIN, "<tool_call>bash<arg_value>1</arg_value></tool_call>", None,
     "<tool_call>bash<arg_value>1</arg_value></tool_call>", []),
    (PLAIN, "<tool_call>bash<arg_key></arg_key><arg_value>1</arg_value></tool_call>", None,
     "<tool_call>bash<arg_key></arg_key><arg_value>1</arg_value></tool_call>", []),
    (PLAIN, "<tool_call>bash<arg_key>a</arg_key><arg_value>1</arg_value>junk</tool_call>", None,
     "<tool_call>bash<arg_key>a</arg_key><arg_value>1</arg_value>junk</tool_call>", []),
    (PLAIN, "<tool_call></tool_call>", None, "<tool_call></tool_call>", []),
    # reasoning then a call cut inside the reasoning: all reasoning
    (PLAIN, "\n<think>still thinking when the limit ca", "still thinking when the limit ca", "", []),
]
IDS = [f"case{i}" for i in range(len(CASES))]


@pytest.mark.parametrize(("fmt", "answer", "reasoning", "content", "calls"), CASES, ids=IDS)
def test_whole_answer(fmt, answer, reasoning, content, calls):
    assert split_answer(answer, fmt, TOOLS) == (reasoning, content, calls)


@pytest.mark.parametrize(("fmt", "answer", "reasoning", "content", "calls"), CASES, ids=IDS)
@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_streamed_in_small_pieces(fmt, answer, reasoning, content, calls, size):
    """Every split: inside `<tool_call>`, the name, the tags, the values, the `<think>` tags."""
    got_reasoning, got_content, got_calls, texts = streamed(fmt, TOOLS, answer, list(range(size, len(answer), size)))
    assert (got_reasoning, got_content.strip(), got_calls) == (reasoning, content.strip(), calls)
    if calls:   # a read call's markup never goes out as text
        assert not any(m in "".join(texts) for m in MARKUP)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CASES), st.lists(st.integers(0, 400), max_size=15))
def test_any_pieces_give_the_whole_answer(case, cuts):
    fmt, answer, reasoning, content, calls = case
    got = streamed(fmt, TOOLS, answer, cuts)
    assert (got[0], got[1].strip(), got[2]) == (reasoning, content.strip(), calls)


def test_text_before_a_call_goes_out_before_the_call_ends():
    s = AnswerStream(PLAIN, TOOLS)
    out = s.feed("\n<think>Hm.</think>\nLet me check the ") + s.feed("files.\n<tool_")
    assert out == [("reasoning", "Hm."), ("text", "Let me check the"), ("text", " files.")]   # whitespace held
    assert s.feed("call>bash\n<arg_key>command</arg_key>\n<arg_value>ls") == []
    answer = "\n<think>Hm.</think>\nLet me check the files.\n<tool_call>bash\n<arg_key>command</arg_key>\n" \
             "<arg_value>ls</arg_value>\n</tool_call>"
    assert s.finish(answer) == ([], "", [call("bash", {"command": "ls"})])


def test_no_tools_offered_the_answer_is_text():
    answer = "<tool_call>bash<arg_key>command</arg_key><arg_value>ls</arg_value></tool_call>"
    assert split_answer(answer, PLAIN, None) == (None, answer, [])


# other formats inside <tool_call> are not GLM's: Hermes' JSON and Qwen3-Coder's XML are read as before,
# also when their arguments quote GLM's markup; prose that mentions the tag is text
def test_hermes_and_qwen_calls_quoting_glm_markup_are_read_whole():
    quote = "bash<arg_key>command</arg_key><arg_value>rm -r build</arg_value>"
    hermes = "<tool_call>\n" + json.dumps({"name": "write_file", "arguments": {"path": "t.py", "content": quote}}) \
        + "\n</tool_call>"
    qwen = ("<tool_call>\n<function=write_file>\n<parameter=path>\nt.py\n</parameter>\n<parameter=content>\n"
            f"{quote}\n</parameter>\n</function>\n</tool_call>")
    assert split_answer(hermes, PLAIN, TOOLS) == (None, "", [call("write_file", {"path": "t.py", "content": quote})])
    assert split_answer(qwen, PLAIN, TOOLS) == (None, "", [call("write_file", {"path": "t.py", "content": quote})])


@pytest.mark.parametrize("answer", ["I wrap calls in <tool_call> tags, then </tool_call>.",
                                    "Use <tool_call>NAME then pairs.", "<tool_call>a b</tool_call>"])
def test_prose_that_mentions_the_tags_is_text(answer):
    assert split_answer(answer, PLAIN, TOOLS) == (None, answer, [])


def test_other_models_text_with_glm_markup_is_text_and_streams():
    """Another model's answer that quotes GLM's format (an agent writing this very parser's tests) is never
    read as a call: the agent would run the call the server invents."""
    answer = ("GLM writes <tool_call>bash<arg_key>command</arg_key><arg_value>rm -r build</arg_value>"
              "</tool_call> for a call.")
    assert split_answer(answer, OTHER, TOOLS) == (None, answer, [])
    s = AnswerStream(OTHER, TOOLS)
    streamed = "".join(t for _, t in s.feed(answer))
    assert streamed + s.finish(answer)[1] == answer and s.finish(answer)[2] == []


def test_glm_calls_follow_the_vocabulary():
    prompt = "<|user|>hi<|assistant|>"
    assert answer_format(VocabEngine({"<arg_key>": 151356, "<tool_call>": 151352}, prompt), [1, 2]).glm_calls
    assert not answer_format(VocabEngine({"<tool_call>": 7}, prompt), [1, 2]).glm_calls
