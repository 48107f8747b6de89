"""A Mistral `[TOOL_CALLS]` call the length limit cut comes back as the APIs give a cut call back, as a cut
`<tool_call>` block does (test_cut_calls.py): its name whole and offered, a call with its arguments as far
as written (`"cut": True`: OpenAI's finish_reason "length", Anthropic's tool_use of the members written
whole); cut before that, no call and no markup as the answer's text. Before, Devstral's cut
`[TOOL_CALLS]read_file[ARGS]{"path": "src/ma` came back as the content. Both layouts the server reads:
`NAME[ARGS]{...}` (with Small 3.2's `[CALL_ID]ID` between) and Nemo's `[{"name": ..., "arguments": ...}]`.
The reader alone (engine mistral.py), then the answer split and streamed as the APIs read it; live through
the SDKs: tests/server/test_mistral_live.py."""

from __future__ import annotations

import pytest
from strata.engine.cut_call import read_cut_bare_call
from strata.engine.mistral import read_cut_mistral_call
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

OFFERED = {"read_file", "read"}
TC = "[TOOL_CALLS]"
EMPTY = {"name": "read_file", "arguments": "{}"}


def cut(name: str, arguments: str, call_id: str | None = None) -> dict:
    return {"name": name, "arguments": arguments, "cut": True} | ({"id": call_id} if call_id else {})


@pytest.mark.parametrize(("content", "found"), [
    # NAME[ARGS]{...}
    (TC, ("", None)),                                                   # nothing after the marker
    ("Reading it." + TC + "read_fi", ("Reading it.", None)),            # cut in the name
    (TC + "read_file", ("", cut("read_file", ""))),                     # after the name (offered, no longer one)
    (TC + "read", ("", None)),                     # an offered name that another offered one goes on from
    (TC + "read[ARGS]", ("", cut("read", ""))),    # ... whole once [ARGS] follows
    ("Reading it." + TC + "read_file[ARGS]", ("Reading it.", cut("read_file", ""))),
    (TC + 'read_file[ARGS]{"path": "src/ma', ("", cut("read_file", '{"path": "src/ma'))),     # inside a string
    (TC + 'read_file[ARGS]{"path": "a.py", "n": 3', ("", cut("read_file", '{"path": "a.py", "n": 3'))),
    (TC + 'read_file[ARGS]{"path": "a.py",', ("", cut("read_file", '{"path": "a.py",'))),   # after a whole value
    (TC + 'read_file[ARGS]{"path": "a [TOOL_CALLS]x[ARGS]{', ("", cut("read_file", '{"path": "a [TOOL_CALLS]x[ARGS]{'))),
    (TC + 'nope[ARGS]{"x": "', ("", None)),                             # not offered
    # Small 3.2: NAME[CALL_ID]ID[ARGS]{...}
    (TC + "read_file[CALL_ID]abc", ("", cut("read_file", ""))),
    (TC + 'read_file[CALL_ID]abcDEF123[ARGS]{"path": "a', ("", cut("read_file", '{"path": "a', "abcDEF123"))),
    (TC + "read_file[CALL_ID]abcDEF123", ("", cut("read_file", "", "abcDEF123"))),    # the id whole: 9 written
    (TC + "read_file[CALL_ID]abcDEF123[ARGS]", ("", cut("read_file", "", "abcDEF123"))),
    (TC + 'read_file[CALL_ID]abcDEF1234[ARGS]{"path": "a', ("", cut("read_file", '{"path": "a'))),  # not 9: none
    (TC + 'read_file[CALL_ID]abc-EF123[ARGS]{"path": "a', ("", cut("read_file", '{"path": "a'))),
    (TC + "read_fi[CALL_ID]abc", ("", None)),
    # not a cut call: the content as it is
    (TC + 'read_file[ARGS]{"path": "a.py"}', None),                     # whole (no closing marker to cut)
    (TC + 'read_file[ARGS]{"path": NaN}', None),                        # whole, malformed
    (TC + "read_file[ARGS]path", None),                                 # not JSON
    ("Try this:\n```\n" + TC + 'read_file[ARGS]{"path": "a', None),      # an example in a code block
    ('<tool_call>\n{"name": "read_file", "arguments": {"path": "' + TC + "read_file[ARGS]{", None),  # quoted
    (TC + '[{"name": "read_file", "arguments": {"path": "a', None),     # Nemo's list: the bare call's (below)
    ("No call here.", None),
])
def test_read_cut_mistral_call(content, found):
    assert read_cut_mistral_call(content, OFFERED) == found


@pytest.mark.parametrize(("content", "found"), [
    # Nemo: [TOOL_CALLS][{"name": ..., "arguments": ...}] as the whole answer
    (TC + "[", ("", [])),
    (TC + '[{"name": "read_', ("", [])),                              # cut in the name
    (TC + '[{"name": "read_file"', ("", [cut("read_file", "")])),          # after the name
    (TC + '[{"name": "read_file", "arguments": {"path": "src/ma', ("", [cut("read_file", '{"path": "src/ma')])),
    (TC + '[{"name": "read_file", "arguments": {"path": "a.py", ', ("", [cut("read_file", '{"path": "a.py",')])),
    (TC + '[{"name": "read_file", "arguments": {"path": "a.py"}', ("", [cut("read_file", '{"path": "a.py"}')])),
    (TC + '[{"name": "read_file", "arguments": {"path": "a.py"}}', ("", [cut("read_file", '{"path": "a.py"}')])),  # `]`
    (TC + '[{"name": "nope", "arguments": {"x', ("", [])),            # not offered: the markup is no answer
    # the other bare calls: Llama's <|python_tag|>, a ```json fence, or none (a JSON answer unless a call's)
    ('<|python_tag|>{"name": "read_file", "parameters": {"path": "a', ("", [cut("read_file", '{"path": "a')])),
    ('```json\n{"name": "read_file", "arguments": {"path": "a', ("", [cut("read_file", '{"path": "a')])),
    ('{"name": "read_file", "arguments": {"path": "a', ("", [cut("read_file", '{"path": "a')])),
    ('[{"name": "read_file", "arguments": {"path": "a', ("", [cut("read_file", '{"path": "a')])),
    ('{"name": "Bob", "age": 4', None),                                 # not an offered tool: a JSON answer
    ('{"name": "read_', None),
    # a later call of the list cut: the calls written whole, then the cut one (was: all of it text)
    (TC + '[{"name": "read_file", "arguments": {}}, {"name": "read_file", "arguments": {"path": "a',
     ("", [EMPTY, cut("read_file", '{"path": "a')])),
    (TC + '[{"name": "read_file", "arguments": {}}, {"name": "read_f', ("", [EMPTY])),     # its name cut
    (TC + '[{"name": "read_file", "arguments": {}}, ', ("", [EMPTY])),                      # after the comma
    (TC + '[{"name": "read_file", "arguments": {}}, {"name": "read_file", "arguments": {"path": "a.py"}}',
     ("", [EMPTY, cut("read_file", '{"path": "a.py"}')])),                                  # only its `]`
    (TC + '[{"name": "nope", "arguments": {}}, {"name": "read_file", "arguments": {"path": "a',
     ("", [{"name": "nope", "arguments": "{}"}, cut("read_file", '{"path": "a')])),        # as the whole reader
    ('[{"name": "read_file", "arguments": {}}, {"name": "read_file", "arguments": {"path": "a',  # no markup
     ("", [EMPTY, cut("read_file", '{"path": "a')])),
    ('```json\n[{"name": "read_file", "parameters": {}}, {"name": "read_file", "parameters": {"path": "a',
     ("", [EMPTY, cut("read_file", '{"path": "a')])),
    ('[{"name": "read_file", "arguments": {}, "id": "abcDEF123"}, {"name": "read_file", "arguments": {"path": "a',
     ("", [EMPTY | {"id": "abcDEF123"}, cut("read_file", '{"path": "a')])),               # Nemo's id kept
    # ... unless the list is no calls, as the whole reader reads it: text
    ('[{"name": "read_file", "arguments": {}}, {"title": "x"}, {"name": "read_file", "arguments": {"pa', None),
    ('[{"name": "Bob", "age": 4}, {"name": "read_file", "arguments": {"path": "a', None),
    ('[{"name": "read_file", "arguments": {}}, "x", {"name": "read_file", "arguments": {"pa', None),
    ('[{"name": "read_file", "arguments": {}}, "a b', None),
    ('[{"name": "read_file", "arguments": {}}, {"title": "x"}', None),                    # only `]` cut
    ('[{"name": "read_file", "arguments": {}}, {"name": "read_file", "results": [1, 2', None),    # 8b4c5d2's rule
    (TC + '[{"name": "read_file", "arguments": {}}, {"name": "read_file", "results": [1', ("", [EMPTY])),  # marked
    # not a cut bare call: the content as it is
    (TC + '[{"name": "read_file", "arguments": {}}]', None),                                # not cut
    ('{"name": "read_file", "arguments": 3}', None),                    # whole (malformed)
    ("Then " + TC + '[{"name": "read_file", "arguments": {"path": "a', None),  # after text
    ("```python\nx = 1", None),
    ("No call here.", None),
])
def test_read_cut_bare_call(content, found):
    assert read_cut_bare_call(content, OFFERED) == found


MISTRAL = AnswerFormat(mistral_calls=True)
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
WHOLE = {"name": "read_file", "arguments": '{"path": "a.py"}'}


@pytest.mark.parametrize(("answer", "content", "calls"), [
    ("Reading it." + TC, "Reading it.", []),
    ("Reading it." + TC + "read_fi", "Reading it.", []),
    ("Reading it." + TC + "read_file", "Reading it.", [cut("read_file", "")]),
    ("Reading it." + TC + 'read_file[ARGS]{"path": "src/ma', "Reading it.", [cut("read_file", '{"path": "src/ma')]),
    (TC + 'read_file[ARGS]{"path": "a.py"}' + TC + 'read_file[ARGS]{"path": "b',
     "", [WHOLE, cut("read_file", '{"path": "b')]),
    (TC + 'read_file[CALL_ID]abcDEF123[ARGS]{"path": "a.py", ', "", [cut("read_file", '{"path": "a.py",', "abcDEF123")]),
    (TC + '[{"name": "read_file", "arguments": {"path": "src/ma', "", [cut("read_file", '{"path": "src/ma')]),
    (TC + '[{"name": "read_', "", []),
    ('<|python_tag|>{"name": "read_file", "parameters": {"path": "a', "", [cut("read_file", '{"path": "a')]),
    ('{"name": "read_file", "arguments": {"path": "a', "", [cut("read_file", '{"path": "a')]),
    ('{"name": "Bob", "age": 4', '{"name": "Bob", "age": 4', []),
    # Nemo's list (or a bare one) cut in its second call: the first call whole, then the cut one (was: text)
    (TC + '[{"name": "read_file", "arguments": {"path": "a.py"}}, {"name": "read_file", "arguments": {"path": "b',
     "", [WHOLE, cut("read_file", '{"path": "b')]),
    (TC + '[{"name": "read_file", "arguments": {"path": "a.py"}, "id": "abcDEF123"}, {"name": "read_fi',
     "", [WHOLE | {"id": "abcDEF123"}]),
    (TC + '[{"name": "read_file", "arguments": {"path": "a.py"}, "id": "abcDEF123"}, {"name": "read_file", '
     '"arguments": {"path": "a.py"}, "id": "abcDEF123"}, {"name": "read_file", "arguments": {"path": "b',
     "", [WHOLE, WHOLE, cut("read_file", '{"path": "b')]),          # an id written twice: not handed out
    ('```json\n[{"name": "read_file", "arguments": {"path": "a.py"}}, {"name": "read_file", "arguments": {"pa',
     "", [WHOLE, cut("read_file", '{"pa')]),
])
def test_a_cut_mistral_call_split_and_streamed(answer, content, calls):
    assert split_answer(answer, MISTRAL, TOOLS, cut=True) == (None, content, calls)
    for step in (1, 4):
        s = AnswerStream(MISTRAL, TOOLS)
        texts = [t for i in range(0, len(answer), step) for k, t in s.feed(answer[i:i + step]) if k == "text"]
        tail, rest, got = s.finish(answer, cut=True)
        assert ("".join(texts) + "".join(t for _, t in tail) + rest, got) == (content, calls)


def test_not_cut_or_not_a_mistral_vocabulary_the_text_stays():
    answer = "Reading it." + TC + 'read_file[ARGS]{"path": "src/ma'
    # the answer ended on its own (a malformed call): text, as before
    assert split_answer(answer, MISTRAL, TOOLS) == (None, answer, [])
    # a vocabulary without [TOOL_CALLS]: another model's text that mentions the format
    assert split_answer(answer, AnswerFormat(), TOOLS, cut=True) == (None, answer, [])


SMALL32_WHOLE = TC + 'read_file[CALL_ID]abcDEF123[ARGS]{"path": "a.py"}'


@pytest.mark.parametrize(("answer", "fmt", "calls"), [
    # the model's whole id is the cut call's, as a whole call's (it got a new one: session 36 left it)
    (TC + 'read_file[CALL_ID]xyzXYZ789[ARGS]{"path": "b', MISTRAL, [cut("read_file", '{"path": "b', "xyzXYZ789")]),
    (SMALL32_WHOLE + TC + 'read_file[CALL_ID]xyzXYZ789[ARGS]{"path": "b', MISTRAL,
     [WHOLE | {"id": "abcDEF123"}, cut("read_file", '{"path": "b', "xyzXYZ789")]),
    # written twice in the answer: neither handed out (keep_written_ids, as for the same answer not cut)
    (SMALL32_WHOLE + TC + 'read_file[CALL_ID]abcDEF123[ARGS]{"path": "b', MISTRAL,
     [WHOLE, cut("read_file", '{"path": "b')]),
    # an id the conversation's calls or results hold: not handed out again (taken_ids)
    (TC + 'read_file[CALL_ID]abcDEF123[ARGS]{"path": "b', AnswerFormat(mistral_calls=True, taken_ids=frozenset(
        {"abcDEF123"})), [cut("read_file", '{"path": "b')]),
])
def test_a_cut_small32_call_keeps_the_id_the_model_wrote(answer, fmt, calls):
    assert split_answer(answer, fmt, TOOLS, cut=True) == (None, "", calls)
    for step in (1, 4):
        s = AnswerStream(fmt, TOOLS)
        texts = [t for i in range(0, len(answer), step) for k, t in s.feed(answer[i:i + step]) if k == "text"]
        tail, rest, got = s.finish(answer, cut=True)
        assert ("".join(texts) + "".join(t for _, t in tail) + rest, got) == ("", calls)
