"""A model with experts served end to end, answering with a Qwen3-Coder-style XML tool call through the
real SDKs: a scripted tiny Mixtral-style model (tests/fixtures/tiny_gguf.py `script` with 4 experts, 2 a
token; real weights, known output) always answers "Reading." then
`\n<tool_call><function=read_file><parameter=path>src/main.py</parameter><parameter=limit>100</function></tool_call>`
(the XML tags whole tokens, as in Qwen3-Coder's vocabulary). The call comes out as the API's tool
call, with the limit as a number, streamed and not, and batched requests give the same answer."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.server.live import LiveServer, scripted_model, sdk_clients

TAGS = ("\n<tool_call>\n", "<function=read_file>\n", "<parameter=path>\n", "src/main.py\n", "</parameter>\n",
        "<parameter=limit>\n", "100\n", "</function>\n", "</tool_call>")
ANSWER = "Reading." + "".join(TAGS)
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}}}}]
ARGS = {"path": "src/main.py", "limit": 100}
MSGS = [{"role": "user", "content": "open main"}]


@pytest.fixture(scope="module")
def served(tiny_model_factory):
    model = scripted_model(tiny_model_factory, ANSWER, ctx_len=2048, n_vocab=512, seed=4, added_tokens=TAGS,
                           n_expert=4, n_expert_used=2)
    with LiveServer(model=str(model), ctx=2048, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


def test_openai_chat_gets_the_xml_call_as_a_tool_call(served):
    oai, _ = served
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=40)
    message = r.choices[0].message
    assert message.content == "Reading." and r.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [("read_file", ARGS)]
    chunks = list(oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=40,
                                              stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    # text before the call streams as it comes, the whitespace before the call block held back (as whole)
    assert "".join(d.content or "" for d in deltas) == "Reading."
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert calls[0].function.name == "read_file"
    assert json.loads("".join(tc.function.arguments or "" for tc in calls)) == ARGS
    without = oai.chat.completions.create(model="m", messages=MSGS, temperature=0, max_tokens=40)
    assert without.choices[0].message.content == ANSWER.strip()    # no tools offered: the text as it is


def test_anthropic_gets_a_tool_use_block(served):
    _, claude = served
    tools = [{"name": "read_file", "input_schema": TOOLS[0]["function"]["parameters"]}]
    m = claude.messages.create(model="m", max_tokens=40, messages=MSGS, tools=tools, extra_body={"temperature": 0})
    assert [b.type for b in m.content] == ["text", "tool_use"] and m.stop_reason == "tool_use"
    assert (m.content[0].text, m.content[1].name, m.content[1].input) == ("Reading.", "read_file", ARGS)


def test_batched_requests_answer_the_same(served):
    oai, _ = served
    def ask(_):
        r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=40)
        return [(c.function.name, json.loads(c.function.arguments)) for c in r.choices[0].message.tool_calls]
    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(ask, range(3))) == [[("read_file", ARGS)]] * 3


def test_lookup_is_off_by_default_for_experts_and_the_feed_names_them(tiny_model_factory):
    """A model with experts: lookup decoding off unless asked for (each guessed row would run experts of its
    own), said in the INFO line; the monitor feed carries the experts. Asked for, it runs."""
    import httpx2 as httpx

    model = tiny_model_factory(ctx_len=2048, n_vocab=512, seed=4, n_expert=4, n_expert_used=2)
    msgs = [{"role": "user", "content": "a b c a b c a b c a b c"}]
    with LiveServer(model=str(model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        assert "lookup decoding off (a model with experts)" in s.state.info_line
        assert "(llama, 2 of 4 experts a token)" in s.state.info_line
        feed = httpx.get(s.url + "/v1/monitor", timeout=30).json()["model"]
        assert (feed["arch"], feed["n_expert"], feed["n_expert_used"]) == ("llama", 4, 2)
        info = [line for line in httpx.get(s.url + "/metrics", timeout=30).text.splitlines()
                if line.startswith("strata_model_info{")]
        assert len(info) == 1 and 'arch="llama"' in info[0] and 'n_expert="4",n_expert_used="2"' in info[0]
        assert info[0].endswith("} 1") and f'name="{feed["name"]}"' in info[0]
        oai, _ = sdk_clients(s)
        oai.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=40)
        assert s.state.metrics.snapshot()["lookup_drafted_total"] == 0
    with LiveServer(model=str(model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0, lookup_draft=8) as s:
        assert "lookup decoding 8 tokens" in s.state.info_line
