"""A GLM `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>` call the length limit cut comes back as
the APIs give a cut call back, as a cut `<tool_call>` JSON block does (test_cut_calls.py): its name whole and
offered, a call whose arguments are the JSON of what was written (the pairs written whole, typed; a string
value cut as written; the object left open), `"cut": True` (OpenAI's finish_reason "length", Anthropic's
tool_use of the members written whole); cut before that, no call and no markup as the answer's text.
Before, `<tool_call>bash<arg_key>command</arg_key><arg_value>ls -l` came back as the content. The reader
alone (engine glm.py), then the answer split and streamed as the APIs read it; live through the SDKs:
tests/server/test_glm_live.py."""

from __future__ import annotations

import jiter
import pytest
from strata.engine.glm import read_cut_glm_call
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

OFFERED = {"bash", "read"}
TYPES = {"bash": {"command": "string", "timeout": "integer"}}
C, T = "<arg_key>command</arg_key><arg_value>", "<arg_key>timeout</arg_key><arg_value>"


def cut(name: str, arguments: str) -> dict:
    return {"name": name, "arguments": arguments, "cut": True}


@pytest.mark.parametrize(("content", "found"), [
    ("<tool_call>", ("", None)),                                         # only the opening tag
    ("Let me look.\n<tool_call>ba", ("Let me look.", None)),              # cut in the name
    ("<tool_call>bash", ("", cut("bash", ""))),                          # after the name (offered, no longer one)
    ("<tool_call>bash\n", ("", cut("bash", ""))),                        # GLM-4.5 / 4.6: a newline after it
    ("<tool_call>read", ("", None)),     # an offered name that another offered one ("read_file") goes on from
    ("<tool_call>bash<arg_key>comm", ("", cut("bash", ""))),             # cut in a key
    ("<tool_call>bash" + C + "ls -l", ("", cut("bash", '{"command": "ls -l'))),           # inside a string
    ("<tool_call>bash" + C + "ls -l</arg_", ("", cut("bash", '{"command": "ls -l'))),     # in its end tag
    ("<tool_call>bash" + C + "a < b <", ("", cut("bash", '{"command": "a < b '))),         # (it may begin one)
    ("<tool_call>bash" + C + 'say "hi</tool_call> <tool_call>',          # tags inside a value are the value's
     ("", cut("bash", '{"command": "say \\"hi</tool_call> <tool_call>'))),
    ("<tool_call>bash" + C + "ls</arg_value>", ("", cut("bash", '{"command": "ls"'))),     # after a whole value
    ("<tool_call>bash" + C + "ls</arg_value>" + T + "3", ("", cut("bash", '{"command": "ls"'))),  # a number cut
    ("<tool_call>bash\n" + C + "ls</arg_value>\n" + T + "30</arg_value>\n",                # only </tool_call> cut
     ("", cut("bash", '{"command": "ls", "timeout": 30'))),
    ("<tool_call>nope" + C + "ls", ("", None)),                          # not offered
    # not a cut GLM call: the content as it is
    ("<tool_call>bash" + C + "ls</arg_value></tool_call>", None),        # whole
    ('<tool_call>\n{"name": "bash", "arguments": {"command": "ls', None),  # Hermes' JSON: read_cut_call's
    ("<tool_call>\n<function=bash>\n<parameter=command>\nls", None),     # Qwen3-Coder's XML
    ("Try this:\n```\n<tool_call>bash" + C + "ls", None),                # an example in a code block
    ("No call here.", None),
])
def test_read_cut_glm_call(content, found):
    assert read_cut_glm_call(content, OFFERED | {"read_file"}, TYPES) == found


def test_anthropic_reads_the_members_written_whole():
    # the arguments as the anthropic SDK reads a cut stream: what the server's tool_use input holds
    assert jiter.from_json(b'{"command": "ls", "timeout": 30', partial_mode=True) == {"command": "ls", "timeout": 30}
    assert jiter.from_json(b'{"command": "ls -l', partial_mode=True) == {}


GLM = AnswerFormat(glm_calls=True)
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {
    "command": {"type": "string"}, "timeout": {"type": "integer"}}, "required": ["command"]}}}]
WHOLE = {"name": "bash", "arguments": '{"command": "ls"}'}


@pytest.mark.parametrize(("answer", "content", "calls"), [
    ("Let me look.\n<tool_call>", "Let me look.", []),
    ("Let me look.\n<tool_call>ba", "Let me look.", []),
    ("Let me look.\n<tool_call>bash", "Let me look.", [cut("bash", "")]),
    ("Let me look.\n<tool_call>bash\n" + C + "ls -l", "Let me look.", [cut("bash", '{"command": "ls -l')]),
    ("<tool_call>bash" + C + "ls</arg_value>" + T + "30</arg_value>", "", [cut("bash", '{"command": "ls", "timeout": 30')]),
    ("<tool_call>bash" + C + "ls</arg_value></tool_call>\n<tool_call>bash" + C + "pw", "",
     [WHOLE, cut("bash", '{"command": "pw')]),
])
def test_a_cut_glm_call_split_and_streamed(answer, content, calls):
    assert split_answer(answer, GLM, TOOLS, cut=True) == (None, content, calls)
    for step in (1, 4):
        s = AnswerStream(GLM, TOOLS)
        texts = [t for i in range(0, len(answer), step) for k, t in s.feed(answer[i:i + step]) if k == "text"]
        tail, rest, got = s.finish(answer, cut=True)
        assert ("".join(texts) + "".join(t for _, t in tail) + rest, got) == (content, calls)


def test_not_cut_or_not_a_glm_vocabulary_the_text_stays():
    answer = "Let me look.\n<tool_call>bash" + C + "ls -l"
    assert split_answer(answer, GLM, TOOLS) == (None, answer, [])          # ended on its own: text, as before
    assert split_answer(answer, AnswerFormat(), TOOLS, cut=True) == (None, answer, [])   # no <arg_key> token
