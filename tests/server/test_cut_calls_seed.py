"""A Seed-OSS `<seed:tool_call>` call (Qwen3-Coder's `<function=NAME>` / `<parameter=P>V</parameter>` XML inside)
the length limit cut comes back as the APIs give a cut call back, as a cut `<tool_call>` JSON block does
(test_cut_calls.py): its `<function=NAME>` tag whole and offered, a call whose arguments are the JSON of what
was written (the parameters written whole, typed; a string value cut as written; the object closed once
`</function>` was written), `"cut": True` (OpenAI's finish_reason "length", Anthropic's tool_use of the
members written whole); cut before that, no call and no markup as the answer's text. Before, the cut block
came back as the content. The reader alone (engine seed.py), then the answer split and streamed as the APIs
read it; live through the SDKs: tests/server/test_seed_live.py."""

from __future__ import annotations

import pytest
from strata.engine.seed import read_cut_seed_call
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

OFFERED = {"bash"}
TYPES = {"bash": {"command": "string", "timeout": "integer"}}
OPEN, FN = "<seed:tool_call>\n", "<seed:tool_call>\n<function=bash>\n"
C, T = "<parameter=command>", "<parameter=timeout>"


def cut(name: str, arguments: str) -> dict:
    return {"name": name, "arguments": arguments, "cut": True}


@pytest.mark.parametrize(("content", "found"), [
    (OPEN, ("", None)),                                                  # only the opening tag
    ("Let me look.\n\n" + OPEN + "<func", ("Let me look.", None)),        # cut in the function tag
    (OPEN + "<function=ba", ("", None)),                                 # cut in the name
    (OPEN + "<function=bash", ("", None)),                               # ... before its `>`
    (OPEN + "<function=bash>", ("", cut("bash", ""))),                   # after the name
    (FN + "<parameter=comm", ("", cut("bash", ""))),                     # cut in a parameter's tag
    (FN + C + "ls -l", ("", cut("bash", '{"command": "ls -l'))),        # inside a string
    (FN + C + "ls -l</param", ("", cut("bash", '{"command": "ls -l'))),  # in its end tag
    (FN + C + 'say "hi</seed:tool_call> <seed:tool_call>',              # tags inside a value are the value's
     ("", cut("bash", '{"command": "say \\"hi</seed:tool_call> <seed:tool_call>'))),
    (FN + C + "ls</parameter>\n", ("", cut("bash", '{"command": "ls"'))),                  # after a whole value
    (FN + C + "ls</parameter>\n" + T + "3", ("", cut("bash", '{"command": "ls"'))),        # a number cut
    (FN + C + "ls</parameter>\n" + T + "30</parameter>\n</function>\n",                    # only the closing tag cut
     ("", cut("bash", '{"command": "ls", "timeout": 30}'))),
    (FN + C + "ls</parameter>\n</function>\n</seed:tool", ("", cut("bash", '{"command": "ls"}'))),
    (OPEN + "<function=nope>\n" + C + "ls", ("", None)),                  # not offered
    # not a cut call: the content as it is
    (FN + C + "ls</parameter>\n</function>\n</seed:tool_call>", None),    # whole
    (FN + C + "ls</parameter>\n</function>\nmore", None),                 # malformed
    (OPEN + "hello", None),
    ("Try this:\n```\n" + FN + C + "ls", None),                           # an example in a code block
    ("No call here.", None),
])
def test_read_cut_seed_call(content, found):
    assert read_cut_seed_call(content, OFFERED, TYPES) == found


SEED = AnswerFormat(seed_calls=True)
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {
    "command": {"type": "string"}, "timeout": {"type": "integer"}}, "required": ["command"]}}}]
WHOLE = {"name": "bash", "arguments": '{"command": "ls"}'}
CALL = FN + C + "ls</parameter>\n</function>\n</seed:tool_call>"


@pytest.mark.parametrize(("answer", "content", "calls"), [
    ("Let me look.\n\n" + OPEN, "Let me look.", []),
    ("Let me look.\n\n" + OPEN + "<function=ba", "Let me look.", []),
    ("Let me look.\n\n" + FN, "Let me look.", [cut("bash", "")]),
    ("Let me look.\n\n" + FN + C + "ls -l", "Let me look.", [cut("bash", '{"command": "ls -l')]),
    (FN + C + "ls</parameter>\n" + T + "30</parameter>\n</function>\n", "", [cut("bash", '{"command": "ls", "timeout": 30}')]),
    (CALL + "\n" + FN + C + "pw", "", [WHOLE, cut("bash", '{"command": "pw')]),
])
def test_a_cut_seed_call_split_and_streamed(answer, content, calls):
    assert split_answer(answer, SEED, TOOLS, cut=True) == (None, content, calls)
    for step in (1, 4):
        s = AnswerStream(SEED, TOOLS)
        texts = [t for i in range(0, len(answer), step) for k, t in s.feed(answer[i:i + step]) if k == "text"]
        tail, rest, got = s.finish(answer, cut=True)
        assert ("".join(texts) + "".join(t for _, t in tail) + rest, got) == (content, calls)


def test_not_cut_or_not_a_seed_vocabulary_the_text_stays():
    answer = "Let me look.\n\n" + FN + C + "ls -l"
    assert split_answer(answer, SEED, TOOLS) == (None, answer, [])          # ended on its own: text, as before
    assert split_answer(answer, AnswerFormat(), TOOLS, cut=True) == (None, answer, [])   # no <seed:tool_call> token
