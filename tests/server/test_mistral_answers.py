"""Mistral answers read by the shared reader (server/prompting.py split_answer / AnswerStream, engine
mistral.py): `[TOOL_CALLS]NAME[ARGS]{...}` calls (Devstral, Small 3.2 with `[CALL_ID]`, Magistral,
Ministral 3), Nemo's JSON list, `[THINK]...[/THINK]` reasoning; whole and streamed in any pieces, the same
result and no markup in the streamed text. Expected outputs of the first cases are llama.cpp's
(tests/test-chat.cpp: Ministral-3-14B-Reasoning-2512, Mistral-Small-3.2, Devstral-Small-2507, Nemo)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strata.server.prompting import AnswerFormat, AnswerStream, answer_format, split_answer
from strata.server.reasoning import MISTRAL_TAGS

from tests.server.answer_checks import VocabEngine, streamed

FMT = AnswerFormat(think=MISTRAL_TAGS, mistral_calls=True)
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
         for n in ("special_function", "special_function_with_opt", "bash", "write_file")]
MARKUP = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]")


def call(name: str, args: dict, **extra) -> dict:
    return {"name": name, "arguments": json.dumps(args, ensure_ascii=False), **extra}


# (answer, reasoning, content, calls)
CASES = [
    ("Hello, world!\nWhat's up?", None, "Hello, world!\nWhat's up?", []),
    ('[TOOL_CALLS]special_function[ARGS]{"arg1":1}', None, "", [call("special_function", {"arg1": 1})]),
    ("[THINK]I'm\nthinking[/THINK]" '[TOOL_CALLS]special_function[ARGS]{"arg1":1}', "I'm\nthinking", "",
     [call("special_function", {"arg1": 1})]),
    ('[TOOL_CALLS]special_function[ARGS]{"arg1": 1}[TOOL_CALLS]special_function_with_opt[ARGS]{"arg1": 1, "arg2": 2}',
     None, "", [call("special_function", {"arg1": 1}), call("special_function_with_opt", {"arg1": 1, "arg2": 2})]),
    ('[THINK]Let me think about [TOOL_CALLS]special_function[ARGS]{"arg1":1} and more[/THINK]'
     '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
     'Let me think about [TOOL_CALLS]special_function[ARGS]{"arg1":1} and more', "",
     [call("special_function", {"arg1": 1})]),
    ('[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}', None, "",
     [call("special_function", {"arg1": 1}, id="123456789")]),
    ('[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{"arg1": 1}'
     '[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{"arg1": 1, "arg2": 2}', None, "",
     [call("special_function", {"arg1": 1}, id="000000001"),
      call("special_function_with_opt", {"arg1": 1, "arg2": 2}, id="000000002")]),
    # an id is handed out only when it is 9 alphanumerics not repeated in the answer
    ('[TOOL_CALLS]bash[CALL_ID]000000001[ARGS]{}[TOOL_CALLS]bash[CALL_ID]000000001[ARGS]{}'
     '[TOOL_CALLS]bash[CALL_ID]call_1[ARGS]{}', None, "", [call("bash", {})] * 3),
    ('Hello, world!\nWhat\'s up?[TOOL_CALLS]special_function[ARGS]{"arg1": 1}', None, "Hello, world!\nWhat's up?",
     [call("special_function", {"arg1": 1})]),
    ('[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]', None, "",
     [call("special_function", {"arg1": 1}, id="123456789")]),
    ('[TOOL_CALLS][{"name": "a", "arguments": {}, "id": "x"}, {"name": "b", "arguments": {}, "id": "abcdefghi"}]',
     None, "", [call("a", {}), call("b", {}, id="abcdefghi")]),
    ("[THINK]raisonnement[/THINK]Réponse", "raisonnement", "Réponse", []),
    # nested JSON, strings holding the markup, unicode, whitespace around the parts
    ('I will write it.\n\n[TOOL_CALLS]write_file[ARGS] {"path": "a [ARGS].txt", "body": {"lines": ["[TOOL_CALLS]x",'
     ' {"deep": [1, {"k": "}"}]}], "é": "ü"}}\n', None, "I will write it.",
     [call("write_file", {"path": "a [ARGS].txt", "body": {"lines": ["[TOOL_CALLS]x", {"deep": [1, {"k": "}"}]}],
                                                          "é": "ü"}})]),
    ('[TOOL_CALLS]bash[ARGS]{"cmd": "ls"}\n[TOOL_CALLS]bash[ARGS]{"cmd": "pwd"}', None, "",
     [call("bash", {"cmd": "ls"}), call("bash", {"cmd": "pwd"})]),
    # cut by the token limit: the calls before stay calls, the cut one is text
    ('[TOOL_CALLS]bash[ARGS]{"cmd": "ls"}[TOOL_CALLS]bash[ARGS]{"cmd": "pw', None,
     '[TOOL_CALLS]bash[ARGS]{"cmd": "pw', [call("bash", {"cmd": "ls"})]),
    ('Let me look.[TOOL_CALLS]ba', None, "Let me look.[TOOL_CALLS]ba", []),
    ('[TOOL_CALLS]bash[ARGS]{"cmd": ', None, '[TOOL_CALLS]bash[ARGS]{"cmd": ', []),
    # malformed: text, never an error
    ("[TOOL_CALLS]bash[ARGS]{cmd: ls}", None, "[TOOL_CALLS]bash[ARGS]{cmd: ls}", []),
    ('[TOOL_CALLS]bash[ARGS]["ls"]', None, '[TOOL_CALLS]bash[ARGS]["ls"]', []),
    ('[TOOL_CALLS]two words[ARGS]{"a": 1}', None, '[TOOL_CALLS]two words[ARGS]{"a": 1}', []),
    ('[TOOL_CALLS][ARGS]{"a": 1}', None, '[TOOL_CALLS][ARGS]{"a": 1}', []),
    ("[TOOL_CALLS]bash[ARGS]" + "[" * 5000 + "]" * 5000, None, "[TOOL_CALLS]bash[ARGS]" + "[" * 5000 + "]" * 5000,
     []),
    # NaN / Infinity (and numbers past a double: 1e999) read in Python but are not JSON: no strict client
    # (JSON.parse, serde_json) reads such arguments or Anthropic's `input`, so the call stays text
    ('[TOOL_CALLS]bash[ARGS]{"n": NaN}', None, '[TOOL_CALLS]bash[ARGS]{"n": NaN}', []),
    ('[TOOL_CALLS]bash[ARGS]{"n": [1, -Infinity]}', None, '[TOOL_CALLS]bash[ARGS]{"n": [1, -Infinity]}', []),
    ('[TOOL_CALLS]bash[ARGS]{"n": 1e999}', None, '[TOOL_CALLS]bash[ARGS]{"n": 1e999}', []),
    ('[TOOL_CALLS]bash[ARGS]{"a": 1}[TOOL_CALLS]bash[ARGS]{"n": NaN}', None, '[TOOL_CALLS]bash[ARGS]{"n": NaN}',
     [call("bash", {"a": 1})]),
    # text after the calls is kept as content
    ('[TOOL_CALLS]bash[ARGS]{"cmd": "ls"} and then done', None, "and then done", [call("bash", {"cmd": "ls"})]),
    # reasoning cut off: all reasoning
    ("[THINK]still thinking when the limit ca", "still thinking when the limit ca", "", []),
]


@pytest.mark.parametrize(("answer", "reasoning", "content", "calls"), CASES)
def test_whole_answer(answer, reasoning, content, calls):
    assert split_answer(answer, FMT, TOOLS) == (reasoning, content, calls)


@pytest.mark.parametrize(("answer", "reasoning", "content", "calls"), CASES)
@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_streamed_in_small_pieces(answer, reasoning, content, calls, size):
    """Every split: inside `[TOOL_CALLS]`, the name, `[ARGS]`, the JSON, the `[THINK]` tags."""
    got_reasoning, got_content, got_calls, texts = streamed(FMT, TOOLS, answer, list(range(size, len(answer), size)))
    assert (got_reasoning, got_content, got_calls) == (reasoning, content, calls)
    if calls:   # a read call's markup never goes out as text
        assert not any(m in "".join(texts) for m in MARKUP)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(CASES), st.lists(st.integers(0, 200), max_size=15))
def test_any_pieces_give_the_whole_answer(case, cuts):
    answer, reasoning, content, calls = case
    assert streamed(FMT, TOOLS, answer, cuts)[:3] == (reasoning, content, calls)


def test_text_before_a_call_goes_out_before_the_call_ends():
    s = AnswerStream(FMT, TOOLS)
    out = s.feed("Let me check the ") + s.feed("files.[TOOL_")
    assert "".join(t for _, t in out) == "Let me check the files."
    assert s.feed('CALLS]bash[ARGS]{"cmd"') == []
    assert s.finish('Let me check the files.[TOOL_CALLS]bash[ARGS]{"cmd": "ls"}') == (
        [], "", [call("bash", {"cmd": "ls"})])


@pytest.mark.parametrize("size", [1, 4, 100])
def test_text_after_a_call_streams_when_the_answer_starts_with_whitespace(size):
    """The whole answer's content is stripped, the streamed text went out with the answer's leading
    whitespace: the text after the call still comes out at the end (it was lost)."""
    answer = ' Let me look.[TOOL_CALLS]bash[ARGS]{"cmd": "ls"} done'
    assert split_answer(answer, FMT, TOOLS) == (None, "Let me look.\ndone", [call("bash", {"cmd": "ls"})])
    _, content, calls, _ = streamed(FMT, TOOLS, answer, list(range(size, len(answer), size)))
    assert (content, calls) == (" Let me look.\ndone", [call("bash", {"cmd": "ls"})])


def test_reasoning_streams_as_it_comes():
    s = AnswerStream(FMT, TOOLS)
    assert s.feed("[THI") == []
    assert s.feed("NK]Step one") == [("reasoning", "Step one")]
    assert s.feed(". Two.[/TH") == [("reasoning", ". Two.")]
    assert s.feed("INK]") == []
    assert s.feed("[TOOL_CALLS]bash") == []


def test_no_tools_offered_the_answer_is_text():
    answer = '[TOOL_CALLS]bash[ARGS]{"cmd": "ls"}'
    assert split_answer(answer, FMT, None) == (None, answer, [])


def test_the_format_follows_the_vocabulary():
    """[THINK] tags for a vocabulary that has the [THINK] token, <think> otherwise (never from the name)."""
    assert answer_format(VocabEngine({"[THINK]": 34, "[/THINK]": 35}, "[INST]hi[/INST]"), [1, 2]).think == MISTRAL_TAGS
    assert answer_format(VocabEngine({"<think>": 5}, "[INST]hi[/INST]"), [1, 2]).think == ("<think>", "</think>")


# Mistral's markup in other models' answers: text that mentions the format (an agent writing this very
# parser's tests) is never a Mistral call, and a call of another format that carries it in its arguments
# is read whole. The coding agent would run the call the server invents.
WRITE_TEST = 'CASES = [(\'[TOOL_CALLS]bash[ARGS]{"cmd": "rm -r build"}\', 1)]'
QWEN_XML = ("<tool_call>\n<function=write_file>\n<parameter=path>\nt.py\n</parameter>\n<parameter=content>\n"
            f"{WRITE_TEST}\n</parameter>\n</function>\n</tool_call>")
HERMES = "<tool_call>" + json.dumps({"name": "write_file", "arguments": {"path": "t.py", "content": WRITE_TEST}}) + \
    "</tool_call>"
OTHER = AnswerFormat()      # a vocabulary without Mistral's [TOOL_CALLS] token


@pytest.mark.parametrize("fmt", [OTHER, FMT])
@pytest.mark.parametrize("answer", [QWEN_XML, HERMES])
def test_a_call_carrying_mistral_markup_in_its_arguments_is_read_whole(fmt, answer):
    want = (None, "", [call("write_file", {"path": "t.py", "content": WRITE_TEST})])
    assert split_answer(answer, fmt, TOOLS + [{"type": "function", "function": {"name": "write_file"}}]) == want


def test_other_models_text_with_mistral_markup_is_text_and_streams():
    answer = f"The test reads:\n```python\n{WRITE_TEST}\n```\nShall I run it?"
    assert split_answer(answer, OTHER, TOOLS) == (None, answer, [])
    s = AnswerStream(OTHER, TOOLS)
    streamed = "".join(t for _, t in s.feed(answer))
    assert streamed == answer and s.finish(answer) == ([], "", [])


def test_mistral_calls_follow_the_vocabulary():
    """Mistral's call reader for a vocabulary with the [TOOL_CALLS] token, not for others."""
    assert answer_format(VocabEngine({"[TOOL_CALLS]": 9}, "[INST]hi[/INST]"), [1, 2]).mistral_calls
    assert not answer_format(VocabEngine({"<tool_call>": 7}, "[INST]hi[/INST]"), [1, 2]).mistral_calls


def test_an_id_the_conversation_already_holds_is_not_handed_out_again():
    """A model copies ids: the one it wrote for an earlier call (in the request's messages) is dropped, so
    the APIs hand out a new one (Anthropic refuses a conversation whose tool_use ids repeat; agents pair
    results by id), whole and streamed; a fresh one is kept."""
    answer = ('[TOOL_CALLS]bash[CALL_ID]000000001[ARGS]{"cmd": "ls"}'
              '[TOOL_CALLS]bash[CALL_ID]000000002[ARGS]{"cmd": "pwd"}')
    fmt = AnswerFormat(think=MISTRAL_TAGS, mistral_calls=True, taken_ids=frozenset({"000000001"}))
    want = [call("bash", {"cmd": "ls"}), call("bash", {"cmd": "pwd"}, id="000000002")]
    assert split_answer(answer, fmt, TOOLS) == (None, "", want)
    s = AnswerStream(fmt, TOOLS)
    assert s.feed(answer) == [] and s.finish(answer) == ([], "", want)


def test_the_ids_taken_are_those_of_the_requests_calls_and_results():
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "abcDEF123", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "xyz987654", "content": "ok"}]
    fmt = answer_format(VocabEngine({"[TOOL_CALLS]": 9}, "[INST]hi[/INST]"), [1, 2], messages)
    assert fmt.taken_ids == {"abcDEF123", "xyz987654"}
