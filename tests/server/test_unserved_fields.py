"""Request fields a cloud API honours that would change the answer here if they were silently ignored get
a 400 that says what to send instead, through the real `openai` SDK on the tiny model: chat completions'
deprecated `functions` / `function_call` (dropping them would drop the tools), an audio answer
(`modalities` with "audio", `audio`), `moderation`, a web search (`web_search_options`; on Responses a request
made for a hosted tool); what changes nothing still answers."""

from __future__ import annotations

import openai
import pytest

ASK = [{"role": "user", "content": "Weather in Oslo?"}]
FUNCTION = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


@pytest.mark.parametrize("fields, param, needle", [
    ({"functions": [FUNCTION]}, "functions",
     "'functions' (deprecated) is not supported: send them as 'tools' ([{\"type\": \"function\", \"function\": ...}])"),
    ({"function_call": {"name": "get_weather"}}, "function_call",
     "'function_call' (deprecated) is not supported: send 'tool_choice'"),
    ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "modalities",
     "an audio answer ('modalities' with \"audio\") is not supported: this model writes text only"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio", "'audio' (an audio answer's voice and format) is not "
                                                              "supported"),
    ({"modalities": "text"}, "modalities", "'modalities' must be an array of strings such as [\"text\"]"),
    ({"moderation": {"model": "omni-moderation-latest", "policy": {"output": {"mode": "block"}}}}, "moderation",
     "'moderation' is not supported: no moderation model runs here, so nothing would be scored or blocked"),
    ({"web_search_options": {}}, "web_search_options",
     "'web_search_options' is not supported: the model cannot search the web here"),
])
def test_chat_fields_that_would_change_the_answer_are_refused(oai, fields, param, needle):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="m", messages=ASK, max_tokens=4, **fields)
    assert needle in e.value.body["message"], e.value.body
    assert e.value.body["param"] == param


def test_what_changes_nothing_is_answered(oai):
    """A text answer asked for, and a `function_call` of "auto" / "none" or empty `functions` (some clients
    send them always): there is nothing to refuse."""
    for fields in ({"modalities": ["text"]}, {"function_call": "none"}, {"function_call": "auto", "functions": []}):
        r = oai.chat.completions.create(model="m", messages=ASK, max_tokens=4, temperature=0, **fields)
        assert r.choices[0].message.content and r.usage.completion_tokens <= 4


def test_moderation_is_refused_on_responses_too(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="m", input="hi", max_output_tokens=4,
                             moderation={"model": "omni-moderation-latest", "policy": {"input": {"mode": "score"}}})
    assert e.value.body["param"] == "moderation" and "no moderation model runs here" in e.value.body["message"]


def test_an_assistants_refusal_in_the_history_is_read_as_its_text(oai):
    """A history an OpenAI model wrote (a client that changed models): a `refusal` part was a 400, a
    `refusal` string with no content an empty turn."""
    def counted(assistant):
        return oai.chat.completions.create(model="m", max_tokens=1, temperature=0, messages=[
            *ASK, assistant, {"role": "user", "content": "Why?"}]).usage.prompt_tokens

    said = counted({"role": "assistant", "content": "I can't help with that."})
    assert counted({"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]}) == said
    assert counted({"role": "assistant", "content": None, "refusal": "I can't help with that."}) == said


def test_a_custom_tool_is_refused_saying_what_to_send(oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="m", messages=ASK, max_tokens=4,
                                    tools=[{"type": "custom", "custom": {"name": "apply_patch"}}])
    assert e.value.body["message"].startswith("tools[0].type must be 'function', got 'custom': a custom tool's "
                                              "free-form input"), e.value.body


WEATHER_FN = {"type": "function", "name": "get_weather", "parameters": FUNCTION["parameters"]}


@pytest.mark.parametrize("fields, param, needle", [
    ({"tools": [{"type": "web_search"}]}, "tools", "'tools' holds only tools Strata cannot run (web_search): "
                                                   "OpenAI's servers run it"),
    ({"tools": [{"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools",
     "'tools' holds only tools Strata cannot run (file_search, web_search)"),
    ({"tools": [WEATHER_FN, {"type": "web_search"}], "tool_choice": {"type": "web_search_preview"}}, "tool_choice",
     "'tool_choice' demands a web_search_preview tool: OpenAI's servers run it"),
])
def test_a_responses_request_made_for_a_hosted_tool_is_refused(oai, fields, param, needle):
    """As on the Anthropic API: a request whose only tools are hosted ones (a web search), or whose tool_choice
    demands one, would be answered with invented results (it was answered as if searched, and a hosted
    choice read as `auto`). Beside a function tool a hosted one is still left out, and `tool_choice: none`
    asks for no tool at all."""
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="m", input="Weather in Oslo?", max_output_tokens=4, **fields)
    assert needle in e.value.body["message"], e.value.body
    assert e.value.body["param"] == param
    for fields in ({"tools": [WEATHER_FN, {"type": "web_search"}]}, {"tools": [{"type": "web_search"}],
                                                                      "tool_choice": "none"}):
        r = oai.responses.create(model="m", input="Weather in Oslo?", max_output_tokens=4, temperature=0, **fields)
        assert r.usage.output_tokens <= 4


@pytest.mark.parametrize("fields, param, needle", [
    ({"tools": [{"type": "shell", "environment": {"type": "local"}}]}, "tools",
     "'tools' holds only tools Strata cannot run (shell): the client runs it, but the model here writes only "
     "function calls"),
    ({"tools": [{"type": "namespace", "name": "crm", "description": "CRM", "tools": [WEATHER_FN]},
                {"type": "web_search"}]}, "tools",
     "(web_search): OpenAI's servers run it; Strata cannot, the model here calls only function tools the client "
     "runs; (namespace): the client runs it"),
    ({"tools": [WEATHER_FN, {"type": "apply_patch"}], "tool_choice": {"type": "apply_patch"}}, "tool_choice",
     "'tool_choice' demands a apply_patch tool: the client runs it, but the model here writes only function calls"),
])
def test_a_client_run_tool_type_not_offered_is_not_called_hosted(oai, fields, param, needle):
    """shell, local_shell, apply_patch and namespace tools are run by the client, not by OpenAI's servers: the
    400 for a request made only for them said 'OpenAI's servers run it'; it says what to send instead."""
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="m", input="Weather in Oslo?", max_output_tokens=4, **fields)
    assert needle in e.value.body["message"], e.value.body
    assert e.value.body["param"] == param
    if param == "tools":
        assert "offer it as a function tool" in e.value.body["message"]
