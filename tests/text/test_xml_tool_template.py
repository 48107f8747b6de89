"""A chat template in Qwen3-Coder's style (tools listed as XML, earlier calls written back as
`<function=...><parameter=...>` blocks, tool results as `<tool_response>` user turns) rendered by
ChatTemplate, and the calls such a model writes parsed back: the round trip an agent's conversation
makes through Strata with that model. The template is written here in that style, using the Jinja
features such templates rely on (a macro with a default argument, the `items` filter, `is mapping` /
`is sequence` tests, `loop.previtem` / `loop.nextitem`, `tojson | safe`, `string` and `trim`)."""

from __future__ import annotations

import json

import pytest
from strata.engine.chat_template import (
    ChatTemplate,
    ChatTemplateError,
    parse_tool_calls,
    tool_parameter_types,
)

XML_TEMPLATE = r"""{% macro listed(xs, tag='required') %}{%- if xs is defined and xs is sequence and xs | length > 0 %}{{ '\n<' ~ tag ~ '>' }}{% for x in xs %}{% if loop.index > 1 %}, {% endif %}{{ "`" ~ x ~ "`" if x is string else x }}{% endfor %}{{ '</' ~ tag ~ '>' }}{% endif %}{% endmacro %}
{%- if messages[0]["role"] == "system" %}{%- set system_message = messages[0]["content"] %}{%- set loop_messages = messages[1:] %}{%- else %}{%- set loop_messages = messages %}{%- endif %}
{%- if not tools is defined %}{%- set tools = [] %}{%- endif %}
{{- "<|im_start|>system\n" + (system_message if system_message is defined else "You are a coder.") }}
{%- if tools | length > 0 %}{{ "\n<tools>" }}{% for tool in tools %}{%- if tool.function is defined %}{%- set tool = tool.function %}{%- endif %}
{{- "\n<function>\n<name>" ~ tool.name ~ "</name>\n<description>" ~ (tool.description | trim) ~ "</description>\n<parameters>" }}
{%- for pname, pfields in tool.parameters.properties | items %}{{ '\n<parameter>\n<name>' ~ pname ~ '</name>' }}
{%- if pfields is mapping %}{% for k, v in pfields.items() %}{% if v is mapping %}{{ '\n<' ~ k ~ '>' ~ (v | tojson | safe) ~ '</' ~ k ~ '>' }}{% elif v is not none %}{{ '\n<' ~ k ~ '>' ~ (v | string) ~ '</' ~ k ~ '>' }}{% endif %}{% endfor %}{% endif %}{{ '\n</parameter>' }}{% endfor %}
{{- listed(tool.parameters.required) }}{{ "\n</parameters>\n</function>" }}{%- endfor %}{{ "\n</tools>" }}{% endif %}<|im_end|>
{%- for message in loop_messages %}
{%- if message.role == "assistant" and message.tool_calls is defined and message.tool_calls | length > 0 %}
{{- '\n<|im_start|>assistant' }}{% if message.content is string and message.content | trim | length > 0 %}{{ '\n' + message.content | trim }}{% endif %}
{%- for tc in message.tool_calls %}{% if tc.function is defined %}{% set tc = tc.function %}{% endif %}{{ '\n<tool_call>\n<function=' + tc.name + '>\n' }}
{%- for an, av in tc.arguments | items %}{{ '<parameter=' + an + '>\n' }}{% set av = av if av is string else av | tojson %}{{ av }}{{ '\n</parameter>\n' }}{% endfor %}{{ '</function>\n</tool_call>' }}{% endfor %}<|im_end|>
{%- elif message.role == "tool" %}{%- if loop.previtem and loop.previtem.role != "tool" %}{{ '\n<|im_start|>user' }}{% endif %}{{ '\n<tool_response>\n' + message.content + '\n</tool_response>' }}{% if loop.last or loop.nextitem.role != "tool" %}<|im_end|>{% endif %}
{%- else %}{{ '\n<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' }}{% endif %}{% endfor %}
{%- if add_generation_prompt %}{{ '\n<|im_start|>assistant\n' }}{% endif %}"""

TOOLS = [{"type": "function", "function": {"name": "write_file", "description": " Writes a file. ", "parameters": {
    "type": "object", "required": ["path", "content"], "properties": {
        "path": {"type": "string", "description": "where"}, "content": {"type": "string"},
        "mode": {"type": ["integer", "null"], "enum": {"octal": True}}}}}}]
CALL = {"path": "package.json", "content": '{"name": "x", "version": 2}', "mode": 420}
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Make a package file."},
    {"role": "assistant", "content": "Writing it.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": json.dumps(CALL)}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "written"},
    {"role": "tool", "tool_call_id": "c2", "content": "also"},
    {"role": "user", "content": "Thanks."},
]


def test_the_xml_template_renders_tools_calls_and_results():
    t = ChatTemplate(XML_TEMPLATE)
    assert t.supports_tools
    text = t.render(MESSAGES, tools=TOOLS)
    assert text.startswith("<|im_start|>system\nBe brief.\n<tools>\n<function>\n<name>write_file</name>\n"
                           "<description>Writes a file.</description>")
    assert "<name>mode</name>\n<type>['integer', 'null']</type>\n<enum>{\"octal\": true}</enum>" in text
    assert "<required>`path`, `content`</required>" in text
    call = ("<|im_start|>assistant\nWriting it.\n<tool_call>\n<function=write_file>\n<parameter=path>\npackage.json\n"
            "</parameter>\n<parameter=content>\n{\"name\": \"x\", \"version\": 2}\n</parameter>\n<parameter=mode>\n420\n"
            "</parameter>\n</function>\n</tool_call><|im_end|>")
    assert call in text     # the arguments (a JSON string on the wire) reached the template as an object
    assert ("<|im_start|>user\n<tool_response>\nwritten\n</tool_response>\n<tool_response>\nalso\n</tool_response>"
            "<|im_end|>\n<|im_start|>user\nThanks.<|im_end|>\n<|im_start|>assistant\n") in text


def test_the_calls_the_model_writes_in_that_form_parse_back_to_the_same_arguments():
    text = ChatTemplate(XML_TEMPLATE).render(MESSAGES[:3], tools=TOOLS, add_generation_prompt=False)
    answer = text[text.index("Writing it."):text.index("<|im_end|>", text.index("Writing it."))]
    content, calls = parse_tool_calls(answer, tool_parameter_types(TOOLS))
    assert content == "Writing it."
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("write_file", CALL)]
    _, untyped = parse_tool_calls(answer)      # without the schema a JSON file's text reads as an object
    assert json.loads(untyped[0]["arguments"])["content"] == {"name": "x", "version": 2}


def test_without_tools_the_template_sees_no_tools_variable():
    """llama.cpp leaves `tools` undefined when there are none, and templates written for GGUF files guard with
    `if not tools is defined` only; a `tools` of None reached `tools | length` and failed the render."""
    text = ChatTemplate(XML_TEMPLATE).render([{"role": "user", "content": "Hi."}])
    assert text == "<|im_start|>system\nYou are a coder.<|im_end|>\n<|im_start|>user\nHi.<|im_end|>\n<|im_start|>assistant\n"
    assert ChatTemplate("{{ tools is defined }}").render([], tools=[]) == "False"


def test_earlier_call_arguments_that_are_not_an_object_are_named():
    """A client that sends back a call's arguments cut or hand-written ('{"path": "x"') got the template's
    `TypeError: Can only get item pairs from a mapping`; the error now names the call by function and id."""
    bad = [*MESSAGES[:2], {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": '{"path": "x"'}}]}]
    with pytest.raises(ChatTemplateError, match=r"the earlier call of 'write_file' \(id 'c1'\): its arguments must be a "
                                                r"JSON object, got '\{\"path\": \"x\"'"):
        ChatTemplate(XML_TEMPLATE).render(bad, tools=TOOLS)
    empty = [*bad[:2], {**bad[2], "tool_calls": [{"id": "c1", "function": {"name": "write_file", "arguments": ""}}]}]
    assert "<function=write_file>\n</function>" in ChatTemplate(XML_TEMPLATE).render(empty, tools=TOOLS)
