"""A held key-value call's value may write the call's own closing tag: an agent's model writing code about tool
calls (a test of a tool-call reader, this server's own files) puts `<tool_call>` and `</tool_call>` in a
parameter. The readers end a Qwen3-Coder block only at the closing tag after `</function>` (and a new block
only at a `<tool_call>` that opens a `<function=`), GLM's and Seed-OSS's values at their own end tags, which a
held value cannot write; so the held-call rule no longer refuses the closing tag. Live: a scripted tiny model
with Qwen3-Coder's XML template, its write_file call held (tools offered, auto), through the openai SDK, whole,
streamed and with parallel calls off: the value comes back whole."""

from __future__ import annotations

import json

import openai
import pytest

from tests.server.live import LiveServer, scripted_model

CODE = 'assert read("<tool_call>x</tool_call>") == []'
PIECES = ("Writing.", "\n<tool_call>\n", "<function=write_file>\n", "<parameter=path>\nt.py\n</parameter>\n",
          "<parameter=content>\n", CODE, "\n</parameter>\n", "</function>\n</tool_call>")
TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "required": ["path", "content"],
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}]
ARGS = {"path": "t.py", "content": CODE}
MESSAGES = [{"role": "user", "content": "Write the reader's test."}]


@pytest.fixture(scope="module")
def coder(tiny_model_factory):
    from tests.text.test_xml_tool_template import XML_TEMPLATE

    model = scripted_model(tiny_model_factory, "".join(PIECES), ctx_len=2048, n_vocab=512, seed=4,
                           added_tokens=PIECES, chat_template=XML_TEMPLATE)
    with LiveServer(model=str(model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)


def test_a_held_value_writes_the_closing_tag_and_is_read_back_whole(coder):
    for extra in ({}, {"parallel_tool_calls": False}):
        r = coder.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=0, max_tokens=40,
                                          **extra)
        m = r.choices[0].message
        assert (m.content, r.choices[0].finish_reason) == ("Writing.", "tool_calls"), extra
        assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [("write_file", ARGS)]
    chunks = list(coder.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=0,
                                                max_tokens=40, stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == ARGS


READERS = {   # a call of write_file whose content is CODE, as each key-value format writes it, and its reader
    "qwen3-coder": ("<tool_call>\n<function=write_file>\n<parameter=path>\nt.py\n</parameter>\n<parameter=content>\n"
                    f"{CODE}\n</parameter>\n</function>\n</tool_call>", {}),
    "glm": ("<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>t.py</arg_value>\n<arg_key>content</arg_key>\n"
            f"<arg_value>{CODE}</arg_value>\n</tool_call>", {"glm_calls": True}),
    "seed": ("<seed:tool_call>\n<function=write_file>\n<parameter=path>t.py</parameter>\n<parameter=content>"
             f"{CODE.replace('tool_call', 'seed:tool_call')}</parameter>\n</function>\n</seed:tool_call>",
             {"seed_calls": True}),
}


@pytest.mark.parametrize("name", READERS)
def test_each_key_value_reader_reads_a_value_holding_the_calls_tags_whole(name):
    """Then a second call after it is read too, and a cut call does not swallow the block after it."""
    from strata.server.prompting import AnswerFormat, split_answer

    call, flags = READERS[name]
    code = CODE.replace("tool_call", "seed:tool_call") if name == "seed" else CODE
    second = call.replace("t.py", "u.py")
    _, content, calls = split_answer(f"Writing.\n{call}\n{second}", AnswerFormat(**flags), TOOLS)
    assert content == "Writing."
    assert [json.loads(c["arguments"]) for c in calls] == [{"path": "t.py", "content": code},
                                                           {"path": "u.py", "content": code}]
    if name == "qwen3-coder":    # no </function>: the block ends at its own tag, before the next block opens
        cut = call.replace("</function>\n", "")
        _, _, calls = split_answer(f"{cut}\n{second}", AnswerFormat(), TOOLS)
        assert [json.loads(c["arguments"])["path"] for c in calls] == ["t.py", "u.py"]
