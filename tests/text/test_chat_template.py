"""ChatTemplate rendering (against the independently rendered parity texts), tools, and tool-call parsing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from strata.engine.chat_template import (
    CHATML_TEMPLATE,
    ChatTemplate,
    ChatTemplateError,
    normalize_messages,
    parse_tool_calls,
    render_tools_into_system,
    tool_parameter_types,
)

from .conftest import parity_cases

CHAT_CASES = [c for c in parity_cases() if c["kind"] == "chat"]

# A Qwen 2.5-style template: tools in the system prompt, tool calls as <tool_call> JSON, tool results
QWEN_LIKE = """{%- if tools %}<|im_start|>system
{{ messages[0]['content'] if messages[0]['role'] == 'system' else 'You are helpful.' }}

<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' and tools %}{% continue %}{% endif %}
{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant
{% for tc in message.tool_calls %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def smollm_template(default_metadata, smollm_tokenizer):
    return ChatTemplate.from_metadata(default_metadata, smollm_tokenizer)


@pytest.mark.parametrize("case", CHAT_CASES, ids=[c["name"] for c in CHAT_CASES])
def test_renders_the_gguf_template_like_the_parity_data(smollm_template, case):
    assert smollm_template.render(case["messages"]) == case["text"]


def test_smollm_template_facts(smollm_template):
    assert smollm_template.bos_token == "<|im_start|>" and smollm_template.eos_token == "<|im_end|>"
    assert not smollm_template.supports_tools
    text = smollm_template.render([{"role": "user", "content": "hi"}], add_generation_prompt=False)
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n")
    assert "You are a helpful AI assistant named SmolLM" in text  # the template's own default system prompt


def test_fallback_is_chatml():
    t = ChatTemplate.from_metadata({})
    assert t.source == CHATML_TEMPLATE
    assert t.render([{"role": "user", "content": "x"}]) == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"


def test_hf_helpers_are_available():
    t = ChatTemplate(
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m | tojson(indent=2) }}"
        "{% endfor %}|{{ strftime_now('%Y') | length }}|{{ bos_token }}{{ eos_token }}|{{ extra_var }}",
        bos_token="<s>", eos_token="</s>",
    )
    out = t.render([{"role": "user", "content": "é"}, {"role": "user", "content": "two"}], extra_var=5)
    assert out == '{\n  "role": "user",\n  "content": "é"\n}|4|<s></s>|5'
    ascii_ = ChatTemplate("{{ messages[0].content | tojson(ensure_ascii=True) }}")
    assert ascii_.render([{"role": "user", "content": "é"}]) == '"\\u00e9"'


def test_raise_exception_and_template_errors_are_chat_template_errors():
    t = ChatTemplate("{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok")
    assert t.render([{"role": "user", "content": ""}]) == "ok"
    with pytest.raises(ChatTemplateError, match="first must be user"):
        t.render([{"role": "assistant", "content": ""}])
    with pytest.raises(ChatTemplateError, match="does not parse"):
        ChatTemplate("{% for %}")
    with pytest.raises(ChatTemplateError, match="empty"):
        ChatTemplate("  ")
    with pytest.raises(ChatTemplateError, match="failed"):
        ChatTemplate("{{ messages[0].content + 1 }}").render([{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("{% for i in range(999999999) %}x{% endfor %}", "OverflowError: Range too big"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{{ 'x' * 10 ** 10 }}", "'*' would make 10000000000 items"),
        ("{{ [1, 2] * 10 ** 9 }}", "'*' would make 2000000000 items"),
        ("{{ 7 ** (10 ** 10) }}", "'**' would make a number of 20000000000+ bits"),
    ],
)
def test_a_template_failing_any_way_is_a_chat_template_error(template, says):
    """A model file's template is untrusted: whatever it does wrong at render time (a range too big, endless
    recursion, a division by zero, a string or number too big to hold) is a ChatTemplateError naming it,
    which the server answers as a bad request; OverflowError / RecursionError / ZeroDivisionError escaped
    (GGUF fuzzing), and 'x' * 10 ** 10 allocated 10 GB. In a child under a 2 GiB address-space limit, so a
    template that allocates fails there."""
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from strata.engine.chat_template import ChatTemplate, ChatTemplateError\n"
        "try:\n"
        "    ChatTemplate(sys.argv[1]).render([{'role': 'user', 'content': 'x'}])\n"
        "except ChatTemplateError as e:\n"
        "    print('ChatTemplateError:', e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, template], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ChatTemplateError:"), done.stdout + done.stderr[-800:]
    assert says in done.stdout, done.stdout


def test_sandbox_refuses_unsafe_access():
    t = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError):
        t.render([{"role": "user", "content": "x"}])
    t = ChatTemplate("{% set _ = messages.append(1) %}x")
    with pytest.raises(ChatTemplateError):
        t.render([{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ("hello", "messages must be a list"),
        ([{"content": "x"}], r"messages\[0\] has no role"),
        (["x"], r"messages\[0\] must be an object"),
        ([{"role": "user", "content": 5}], r"messages\[0\]: message content must be a string"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "only text parts"),
        ([{"role": "assistant", "content": None, "tool_calls": [{"function": {}}]}], "without a function name"),
    ],
)
def test_bad_messages_are_named(messages, message):
    with pytest.raises(ChatTemplateError, match=message):
        ChatTemplate(CHATML_TEMPLATE).render(messages)


def test_content_parts_and_none_are_normalised():
    msgs = normalize_messages([
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
    ])
    assert msgs[0]["content"] == "ab"
    assert msgs[1]["content"] == ""
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    assert msgs[1]["tool_calls"][0]["id"] == "c1"


CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
    ]},
    {"role": "tool", "tool_call_id": "a", "content": "18C"},
    {"role": "tool", "tool_call_id": "b", "content": "24C"},
]


def test_render_tools_into_system_format():
    msgs = render_tools_into_system(CONVERSATION, [WEATHER_TOOL])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    system = msgs[0]["content"]
    assert system.startswith("Be brief.\n\n# Tools\n")
    assert "<tools>\n" + json.dumps(WEATHER_TOOL) + "\n</tools>" in system
    assert "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>" in system
    assert msgs[2]["content"] == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    )
    assert msgs[3]["content"] == "<tool_response>\n18C\n</tool_response>\n<tool_response>\n24C\n</tool_response>"
    no_system = render_tools_into_system(CONVERSATION[1:2], [WEATHER_TOOL])
    assert no_system[0]["role"] == "system" and no_system[0]["content"].startswith("# Tools")


def test_template_without_tool_support_gets_tools_in_system(smollm_template):
    text = smollm_template.render(CONVERSATION, tools=[WEATHER_TOOL])
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert "<|im_start|>user\n<tool_response>\n18C" in text
    assert text.endswith("<|im_start|>assistant\n")
    # the model's own answer in that format parses back
    content, calls = parse_tool_calls('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>')
    assert content == "" and calls == [{"name": "get_weather", "arguments": '{"city": "Oslo"}'}]


def test_template_with_tool_support_gets_tools_and_object_arguments():
    t = ChatTemplate(QWEN_LIKE)
    assert t.supports_tools
    text = t.render(CONVERSATION, tools=[WEATHER_TOOL])
    assert json.dumps(WEATHER_TOOL) in text and text.startswith("<|im_start|>system\nBe brief.\n\n<tools>")
    assert '{"name": "get_weather", "arguments": {"city": "Rome"}}' in text  # arguments rendered as an object
    assert "<tool_response>\n24C\n</tool_response>" in text
    assert "# Tools" not in text  # Strata's own block is not added


def test_template_that_concatenates_string_arguments_gets_strings():
    # mentions tools, but writes arguments with `+` (DeepSeek style): objects fail, the JSON string works
    t = ChatTemplate(
        "{% for m in messages %}{% for tc in m.tool_calls or [] %}"
        "{{ tc.function.name + ':' + tc.function.arguments }};{% endfor %}{% endfor %}{{ tools | length }}"
    )
    assert t.supports_tools
    out = t.render(CONVERSATION, tools=[WEATHER_TOOL])
    assert out == 'get_weather:{"city": "Paris"};get_weather:{"city": "Rome"};1'


def test_a_template_failing_either_way_reports_the_first_error():
    t = ChatTemplate("{% for m in messages %}{{ m.tool_calls[0].function.arguments.city + 1 }}{% endfor %}{{ tools }}")
    with pytest.raises(ChatTemplateError, match="failed"):
        t.render(CONVERSATION[2:3], tools=[WEATHER_TOOL])


def test_tool_parameter_types_skip_what_is_not_a_schema():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {
                 "a": {"type": "string"}, "b": {"type": ["integer", "null"]}, "c": {}, "d": "junk"}}}},
             {"type": "function", "function": {"name": "g"}}, {"name": "h", "parameters": {"properties": {"x": {"type": "number"}}}},
             "junk", {"function": None}]
    assert tool_parameter_types(tools) == {"f": {"a": "string", "b": ["integer", "null"], "c": None},
                                           "h": {"x": "number"}}
    assert tool_parameter_types(None) == {}


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ("plain answer", "plain answer", []),
        ('Let me check.\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>',
         "Let me check.", [("f", {"a": 1})]),
        ('<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "g", "arguments": {"b": "é"}}</tool_call>',
         "", [("f", {}), ("g", {"b": "é"})]),
        ('<tool_call>\n{"name": "f", "arguments": {"a": 2}}', "", [("f", {"a": 2})]),  # unterminated at the end
        ('Sure.<TOOLCALL>[{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]</TOOLCALL>',
         "Sure.", [("f", {"a": 1}), ("g", {})]),
        ('<tool_call>not json</tool_call> text', '<tool_call>not json</tool_call> text', []),
        # a closing tag inside a call's arguments is their text (a call writing code about tool calls): the
        # JSON block ends where its JSON does, the XML block at the closing tag after its </function>
        ('<tool_call>\n{"name": "w", "arguments": {"code": "END = \\"</tool_call>\\""}}\n</tool_call>\n'
         '<tool_call>{"name": "g", "arguments": {}}</tool_call> Done.',
         "Done.", [("w", {"code": 'END = "</tool_call>"'}), ("g", {})]),
        ('<tool_call>{"name": "w", "arguments": {"code": "</tool_call>"}}', "", [("w", {"code": "</tool_call>"})]),
        ("<tool_call>\n<function=w>\n<parameter=code>\nEND = '</tool_call>'\n</parameter>\n</function>\n"
         "</tool_call>\nDone.", "Done.", [("w", {"code": "END = '</tool_call>'"})]),
        # Qwen3-Coder: XML functions and parameters; values are strings unless they read as other JSON
        ("I will read it.\n<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/main.py\n</parameter>\n"
         "<parameter=limit>\n100\n</parameter>\n</function>\n</tool_call>",
         "I will read it.", [("read_file", {"path": "src/main.py", "limit": 100})]),
        ("<tool_call>\n<function=write>\n<parameter=content>\ndef f():\n    return 1\n\n</parameter>\n"
         "<parameter=opts>\n{\"a\": [1]}\n</parameter>\n<parameter=force>\ntrue\n</parameter>\n</function>\n</tool_call>\n"
         "<tool_call>\n<function=list_files>\n</function>\n</tool_call>",
         "", [("write", {"content": "def f():\n    return 1\n", "opts": {"a": [1]}, "force": True}), ("list_files", {})]),
        ("<tool_call>\n<function=run>\n<parameter=cmd>\nls -la", "", [("run", {"cmd": "ls -la"})]),  # cut off
        # '<' and '>' in values, a parameter named like another's prefix, two functions in one block, text after
        ("<tool_call>\n<function=edit>\n<parameter=path>\na.html\n</parameter>\n<parameter=path_old>\nif a < b > c:\n"
         "    x = '<div>'\n</parameter>\n</function>\n<function=run>\n<parameter=cmd>\nls > out\n</parameter>\n"
         "</function>\n</tool_call>\nDone.",
         "Done.", [("edit", {"path": "a.html", "path_old": "if a < b > c:\n    x = '<div>'"}), ("run", {"cmd": "ls > out"})]),
        ('{"name": "f", "arguments": {"q": "x"}}', "", [("f", {"q": "x"})]),
        ('{"name": "f", "parameters": {"q": "x"}}', "", [("f", {"q": "x"})]),
        ('  ```json\n{"name": "f", "arguments": {"q": 1}}\n```  ', "", [("f", {"q": 1})]),
        ('[{"name": "f", "arguments": {}}, {"name": "g", "arguments": {"z": null}}]', "", [("f", {}), ("g", {"z": None})]),
        ('<|python_tag|>{"name": "f", "arguments": {"n": 3}}', "", [("f", {"n": 3})]),
        ('[TOOL_CALLS][{"name": "f", "arguments": {}}]', "", [("f", {})]),
        ('{"name": "f", "arguments": "{\\"k\\": 1}"}', "", [("f", {"k": 1})]),  # arguments already a JSON string
        ('{"title": "not a call"}', '{"title": "not a call"}', []),
        ('{"name": "x"}', '{"name": "x"}', []),  # no arguments: not a call
        ("{broken", "{broken", []),
    ],
)
def test_parse_tool_calls(text, content, calls):
    got_content, got_calls = parse_tool_calls(text)
    assert got_content == content
    assert [(c["name"], json.loads(c["arguments"])) for c in got_calls] == calls
    for c in got_calls:
        assert isinstance(c["arguments"], str)


def xml_call(params: dict[str, str]) -> str:
    """Qwen3-Coder's XML call of function `f` with these parameters written as the model writes them."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function=f>\n{body}</function>\n</tool_call>"


def tool_f(properties: dict) -> list[dict]:
    return [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": properties}}}]


def test_xml_values_of_string_parameters_declared_by_anyof_or_enum_stay_strings():
    """Optional[str] as pydantic writes it (anyOf string / null) and a string enum without `type`: a
    number-like value is still the string written ('1984', not 1984); null for the nullable one."""
    tools = tool_f({"title": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                    "level": {"enum": ["1", "2"]}, "note": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                    "count": {"anyOf": [{"type": "integer"}, {"type": "null"}]}})
    types = tool_parameter_types(tools)
    _, calls = parse_tool_calls(xml_call({"title": "1984", "level": "1", "note": "42", "count": "7"}), types)
    assert json.loads(calls[0]["arguments"]) == {"title": "1984", "level": "1", "note": "42", "count": 7}
    _, calls = parse_tool_calls(xml_call({"title": "null"}), types)
    assert json.loads(calls[0]["arguments"]) == {"title": None}


@pytest.mark.parametrize("schema_type", [{"x": 1}, [{"x": 1}], [["string"]], 5])
def test_xml_values_with_a_malformed_schema_type_are_read_as_untyped(schema_type):
    """A client's schema whose `type` is not a name or a list of names: no crash, the value is read as
    without a schema."""
    types = tool_parameter_types(tool_f({"p": {"type": schema_type}}))
    _, calls = parse_tool_calls(xml_call({"p": "12"}), types)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("f", {"p": 12})]


@pytest.mark.parametrize("written", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "[1, 1e999]"])
def test_xml_values_never_make_arguments_that_are_not_json(written):
    """json.loads reads NaN / Infinity (and 1e999, a number past a double, as inf), json.dumps writes them
    back, and none is JSON: a strict client (serde_json, JSON.parse) rejects the call. They stay the
    strings written."""
    for types in ({}, tool_parameter_types(tool_f({"x": {"type": "number"}}))):
        _, calls = parse_tool_calls(xml_call({"x": written}), types)
        assert json.loads(calls[0]["arguments"], parse_constant=lambda c: pytest.fail(f"{c} in the arguments")) == {
            "x": written}


@pytest.mark.parametrize("value", ["NaN", "-Infinity", "1e999"])
@pytest.mark.parametrize("shape", ['{{"name": "f", "arguments": {{"x": {v}}}}}', '<tool_call>{{"name": "f", "arguments": '
                                   '{{"x": {v}}}}}</tool_call>', '[TOOL_CALLS][{{"name": "f", "arguments": {{"x": {v}}}}}]'])
def test_json_calls_never_make_arguments_that_are_not_json(shape, value):
    """The JSON readers (bare, <tool_call>, Nemo's list) with NaN / Infinity / a number past a double in
    the arguments: json.loads reads them, json.dumps writes them back, and no strict client reads that.
    Such a call is not read (the answer stays text)."""
    text = shape.format(v=value)
    assert parse_tool_calls(text) == (text, [])
    _, calls = parse_tool_calls(f'{{"name": "f", "arguments": "{{\\"x\\": {value}}}"}}')   # as a string
    assert calls == [{"name": "f", "arguments": json.dumps(f'{{"x": {value}}}')}]


def test_json_nested_deeper_than_json_reads_is_text_not_a_crash():
    """json.loads raises RecursionError (not a ValueError) past ~1,000 levels: an answer or a client's
    arguments nested that deep stay text, never an exception out of the parser (the server's 500)."""
    deep = "[" * 100_000
    content, calls = parse_tool_calls(f"<tool_call>{deep}</tool_call>")
    assert calls == [] and deep in content
    content, calls = parse_tool_calls(f'<tool_call>{{"name": "f", "arguments": "{deep}"}}</tool_call>')
    assert calls == [{"name": "f", "arguments": json.dumps(deep)}]
    messages = normalize_messages([{"role": "assistant", "content": "",
                                    "tool_calls": [{"function": {"name": "f", "arguments": deep}}]}])
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == deep
