"""A call whose arguments hold the call markup's closing tag (an agent writing code about tool calls: a chat
template, a parser, this server) is read whole through the real `openai` SDK, with parallel calls on and
off: the closing tag inside a JSON string or an XML parameter is the argument's text, neither the block's
end (the call was dropped into the content, or cut short) nor where one call at a time ends the answer."""

from __future__ import annotations

import json

import openai
import pytest

from tests.server.live import LiveServer

INNER = ("</tool_call>",)      # the closing tag the model writes inside the argument, its own token
SCRIPTS = {   # the script's tokens, each an added token (all different): a call with the tag inside, a second call
    "json": ("Writing.", "<tool_call>", '\n{"name": "write_file", "arguments": {"content": "END = \\"', *INNER,
             '\\""}}\n</tool_call>', '\n<tool_call>\n{"name": "get_time", "arguments": {}}', "\n</tool_call>"),
    "xml": ("Writing.", "<tool_call>", "\n<function=write_file>\n<parameter=content>\nEND = \"", *INNER,
            "\"\n</parameter>\n</function>", "\n</tool_call>", "\n<tool_call>\n<function=get_time>\n</function>",
            "\n</tool_call>\n"),
}
TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"content": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
WRITE = ("write_file", {"content": 'END = "</tool_call>"'})


@pytest.fixture(scope="module", params=["json", "xml", "json-held", "xml-held"])
def oai(tiny_model_factory, request):
    """The script on a ChatML template (the answer is free), the JSON one on a Qwen 2.5-style template and the
    XML one on Qwen3-Coder's, whose calls are held to the tools while written (the held call may write the tag
    in a JSON string or a parameter's value)."""
    from tests.text.test_chat_template import QWEN_LIKE
    from tests.text.test_xml_tool_template import XML_TEMPLATE

    script = SCRIPTS[request.param.removesuffix("-held")]
    held = {"json-held": QWEN_LIKE, "xml-held": XML_TEMPLATE}
    template = {"chat_template": held[request.param]} if request.param in held else {}
    shape = dict(ctx_len=2048, n_vocab=512, seed=3, added_tokens=script, **template)
    ids = (13, *range(512, 512 + len(script)), 2)    # after the prompt's last "\n": the added tokens, <|im_end|>
    with LiveServer(model=str(tiny_model_factory(**shape, script=ids)), ctx=2048, batch=2, threads=1,
                    conversation_cache_mib=0) as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)


def calls_of(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()]


def test_a_closing_tag_inside_the_arguments_is_their_text(oai):
    ask = dict(model="m", messages=[{"role": "user", "content": "Write it."}], tools=TOOLS, temperature=0,
               max_tokens=200)
    both = oai.chat.completions.create(**ask)
    assert calls_of(both.choices[0].message) == [WRITE, ("get_time", {})]
    assert both.choices[0].message.content == "Writing."
    one = oai.chat.completions.create(**ask, parallel_tool_calls=False)
    assert calls_of(one.choices[0].message) == [WRITE] and one.choices[0].finish_reason == "tool_calls"
    # the answer ended once the call was whole (its JSON or its </function> closed), not at the tag inside
    # its arguments and not after the second call
    assert 5 <= one.usage.completion_tokens <= both.usage.completion_tokens - 2
    chunks = list(oai.chat.completions.create(**ask, parallel_tool_calls=False, stream=True))
    streamed = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in streamed] == [WRITE]
