"""Where an answer becomes a bare JSON call's start (strata.engine.bare_call_scan, Llama 3's calls): CALLED at the
byte that makes the first object's "name" a string beside an "arguments" / "parameters" key, after whitespace,
`<|python_tag|>` / `[TOOL_CALLS]`, a ```json fence and a reasoning block, as chat_template.parse_tool_calls
reads a call; never for a JSON answer whose first object is no call. Checked against the reader itself on
tables and on random answers."""

from __future__ import annotations

import json
import random

import pytest
from strata.engine.bare_call_scan import CALLED, FREE, Head, Lead, bare_call_scan, bare_call_start, body_start
from strata.engine.call_objects import as_call
from strata.engine.chat_template import parse_tool_calls
from strata.server.reasoning import split_reasoning

THINK = (b"<think>", b"</think>")


def called_at(text: str, step: int = 1, reasoning: tuple[bytes, bytes] | None = THINK) -> int | None:
    """The byte offset of the piece that made `text` a call's start (fed `step` bytes at a time), or None."""
    data, state = text.encode(), bare_call_start(reasoning)
    for i in range(0, len(data), step):
        state = bare_call_scan(state, data[i:i + step], reasoning)
        if state == CALLED:
            return i
    return None


def read_as_call(text: str) -> bool:
    """Whether the server's readers take the whole answer as calls (its reasoning first taken off)."""
    _, content = split_reasoning(text, False)
    return bool(parse_tool_calls(content, mistral=False, glm=False, seed=False)[1])


# (answer, where CALLED: the text up to and through the byte that makes it a call's start)
CALLS = [
    ('{"name": "get_weather", "parameters": {"city": "Paris"}}', '{"name": "get_weather", "parameters"'),
    ('{"name":"f","arguments":{}}', '{"name":"f","arguments"'),
    ('  \n{ "name" : "f" , "parameters" : {} }', '  \n{ "name" : "f" , "parameters"'),
    ('{"parameters": {"a": "}"}, "name": "f"}', '{"parameters": {"a": "}"}, "name": "'),    # name after
    ('{"type": "function", "name": "f", "parameters": {}}', '{"type": "function", "name": "f", "parameters"'),
    ('{"na\\u006de": "f", "parameters": {}}', '{"na\\u006de": "f", "parameters"'),          # an escaped key
    ('[{"name": "f", "parameters": {}}]', '[{"name": "f", "parameters"'),
    ('<|python_tag|>{"name": "f", "parameters": {}}', '<|python_tag|>{"name": "f", "parameters"'),
    ('[TOOL_CALLS] {"name": "f", "arguments": {}}', '[TOOL_CALLS] {"name": "f", "arguments"'),
    ('```json\n{"name": "f", "parameters": {}}\n```', '```json\n{"name": "f", "parameters"'),
    ('```\n[{"name": "f", "parameters": {}}]```', '```\n[{"name": "f", "parameters"'),
    ('<think>{"name": "x", "parameters": {}}</think>\n{"name": "f", "parameters": {}}',
     '<think>{"name": "x", "parameters": {}}</think>\n{"name": "f", "parameters"'),
    ('\u3000{"name": "f", "parameters": {}}', '\u3000{"name": "f", "parameters"'),          # str.strip's space
]

NOT_CALLS = [
    '{"name": "Alice", "age": 3}',                        # a JSON answer: no arguments
    '{"parameters": {"a": 1}, "name": 5}',                # a name that is no string
    '{"name": {"parameters": 1}, "x": 2}',                # keys inside a value
    '{"a": {"name": "f", "parameters": {}}}',             # a call nested in an answer
    '{"name": "Al\\"ice", "kind": "parameters"}',         # "parameters" as a value
    '[{"name": "a"}, {"name": "f", "parameters": {}}]',   # a list whose first object is no call
    'Sure: {"name": "f", "parameters": {}}',              # after prose
    '```python\n{"name": "f", "parameters": {}}\n```',    # a fence of another language
    '```JSON\n{"name": "f", "parameters": {}}\n```',
    '[TOOL_CALLS]<|python_tag|>{"name": "f", "parameters": {}}',   # the tags stripped in their order only
    '{"name": "f"} {"name": "f", "parameters": {}}',      # the first object closed
    '<think>x</think>Hi {"name": "f", "parameters": {}}',
    '{"name": "f", "parameters\\u0078": {}}',
    '{"note": "{\\"name\\": \\"f\\", \\"parameters\\": {}}"}',   # a call quoted in a string
]

# no calls as the reader reads them whole, refused all the same (docs/api.md says so): the token that makes the
# first object a call's comes before what follows it
REFUSED_THOUGH_NO_CALL = [
    '{"name": "f", "parameters": {}} is how it is called',
    '[{"name": "a", "arguments": 1}, 5]',
]


@pytest.mark.parametrize("answer, through", CALLS)
@pytest.mark.parametrize("step", [1, 3, 1000])
def test_a_call_is_found_at_the_byte_that_makes_it_one(answer, through, step):
    assert read_as_call(answer), answer                    # the table holds what the reader takes as calls
    at = called_at(answer, step)
    end = len(through.encode())
    assert at is not None and at < end <= at + step, (at, end)


@pytest.mark.parametrize("answer", NOT_CALLS)
def test_an_answer_that_is_no_call_is_never_refused(answer):
    assert not read_as_call(answer)
    assert called_at(answer) is None


@pytest.mark.parametrize("answer", REFUSED_THOUGH_NO_CALL)
def test_a_call_shaped_first_object_is_refused_whatever_follows(answer):
    assert not read_as_call(answer)
    assert called_at(answer) is not None


def test_prose_and_a_closed_object_need_no_more_watching():
    assert bare_call_scan(bare_call_start(THINK), b"Hi", THINK) == FREE
    assert bare_call_scan(bare_call_start(None), b'{"name": "Alice"}', None) == FREE
    assert isinstance(bare_call_scan(bare_call_start(THINK), b" <thi", THINK), Lead)       # maybe a reasoning
    assert isinstance(bare_call_scan(bare_call_start(None), b" \xe3\x80", None), Head)      # a space unfinished
    assert bare_call_scan(bare_call_start(THINK, opened=True), b"x</think>Hi", THINK) == FREE


@pytest.mark.parametrize("text, start", [
    ("", True), ("  ", True), ("<|py", True), ("<|python_tag|> ", True), ("[TOOL", True), ("`", True),
    ("```js", True), ("```json  ", True), ("{", 0), (" [", 1), ("<|python_tag|> {", 15), ("```json\n{", 8),
    ("```\n[", 4), ("Hi", None), ("```python", None), ("[TOOL_CALLS]x", None), ("```jsonx", None),
])
def test_where_the_json_begins(text, start):
    assert body_start(text) == start


# ----- against the reader, on random answers -----

KEYS = ["name", "parameters", "arguments", "type", "na\\u006de", "x"]
VALUES = ['"f"', '{"a": "}"}', "1", "null", '[1, "]"]', '"a\\"b"', "{}", '"name"']
LEADS = ["", " ", "\n\n", "<|python_tag|>", " <|python_tag|> ", "[TOOL_CALLS]", "<think>{\"name\": \"x\"}</think>",
         "Hi "]
FENCES = [("", ""), ("```json\n", "\n```"), ("```\n", "```"), ("```python\n", "\n```")]


def random_answer(rng: random.Random) -> tuple[str, str, str]:
    """(an answer, its first object, the answer cut to it: its lead, its fence opened and closed, the first
    object alone, in a list of one when the answer's JSON is a list)."""
    def obj() -> str:
        members = rng.sample(KEYS, rng.randint(0, 4))
        return "{" + ", ".join(f'"{k}":{rng.choice(["", " "])}{rng.choice(VALUES)}' for k in members) + "}"
    listed = rng.random() < 0.3
    objects = [obj() for _ in range(rng.randint(0, 3) if listed else 1)]
    body = "[" + ", ".join(objects) + "]" if listed else objects[0]
    first = objects[0] if objects else ""
    lead, fence = rng.choice(LEADS), rng.choice(FENCES)
    alone = lead + fence[0] + ("[" + first + "]" if listed else first) + fence[1]
    return lead + fence[0] + body + fence[1] + rng.choice(["", " ", " ok"]), first, alone


def test_random_answers_agree_with_the_reader():
    """Every answer the reader takes as calls is refused, and an answer is refused exactly when the reader
    takes its first object as a call, the answer cut to it (whatever follows it, unknown when the token comes:
    a later element, prose). The reader decides both, not body_start (which the scan uses: finding the
    first object with it left every answer whose lead it refuses unchecked, a call after prose or in a
    ```python fence among them)."""
    rng = random.Random(4)
    calls = refused_no_calls = free_calls = 0
    for _ in range(3000):
        answer, first, alone = random_answer(rng)
        at = called_at(answer, rng.choice([1, 2, 5]))
        if read_as_call(answer):
            calls += 1
            assert at is not None, answer
        if '"name":' in first and '"na\\u006de":' in first:
            continue                                       # a later "name" may undo the first
        assert (at is not None) == read_as_call(alone), (answer, alone)
        refused_no_calls += at is not None and not read_as_call(answer)
        free_calls += at is None and as_call(json.loads(first or "0")) is not None
    assert calls > 100 and refused_no_calls > 20 and free_calls > 50, (calls, refused_no_calls, free_calls)


@pytest.mark.parametrize("lead", ["", "<|python_tag|>", " [TOOL_CALLS] ", "```json", "<|python_tag|>```"])
@pytest.mark.parametrize("reasoning", [None, THINK])
def test_a_run_of_whitespace_leaves_the_watch_its_size(lead, reasoning):
    """A model that writes blank lines before its answer (small ones loop so) costs each token the same: the
    state before the JSON holds the markup, not every whitespace byte (it held them all, and each token
    read them again: 1.4 ms a token after 8,000 `\\n\\n` tokens, against 10 us after a few)."""
    def after(run: int) -> object:
        state = bare_call_scan(bare_call_start(reasoning), lead.encode(), reasoning)
        for _ in range(run):
            state = bare_call_scan(state, b"\n\n", reasoning)
        return bare_call_scan(state, b" \xe3\x80", reasoning)          # and an unfinished ideographic space
    assert after(2000) == after(1)
    assert called_at(lead + "\n\n" * 50 + ' \u3000{"name": "f", "parameters": {}}', 2, reasoning) is not None
