"""A turn whose `tool_choice` names one tool reuses the conversation's history, on all three APIs, through
the real SDKs on a live tiny server.

An agent that names a tool on one turn (Claude Code's `{"type": "tool", "name": ...}`, chat's named
function, the Responses API's) sends the same tools as on its other turns. The template used to write only
the named tool, so the prompt's start (system prompt and tools) differed from every other turn's and the
whole conversation was read again, twice: on the named turn and on the next one (measured in Claude Code's
shape on the default model: 6,426 of 6,557 tokens read at turn 8). Every tool is now written and the
demanded call is held to the named one by name."""

from __future__ import annotations

CLOCK = {"name": "clock", "description": "The time in a zone.",
         "schema": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 4}}, "required": ["zone"]}}
WEATHER = {"name": "get_weather", "description": "The weather of a city, today and for the next days.",
           "schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 6},
                                                       "days": {"type": "integer"}}, "required": ["city"]}}
CHAT_TOOLS = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                "parameters": t["schema"]}} for t in (WEATHER, CLOCK)]
RESPONSES_TOOLS = [{"type": "function", "name": t["name"], "description": t["description"], "parameters": t["schema"]}
                   for t in (WEATHER, CLOCK)]
CLAUDE_TOOLS = [{"name": t["name"], "description": t["description"], "input_schema": t["schema"]}
                for t in (WEATHER, CLOCK)]
FIRST = "We are planning a trip and need the weather and the time in a few places. " * 3


def test_a_chat_turn_naming_a_function_reuses_the_history(oai):
    messages = [{"role": "system", "content": "You are a travel agent. Use the tools."},
                {"role": "user", "content": FIRST + "(chat)"}]
    first = oai.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS, max_tokens=4, temperature=0)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "What time is it?"}]
    for choice in ({"type": "function", "function": {"name": "clock"}},
                   {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
                       {"type": "function", "function": {"name": "clock"}}]}}):
        named = oai.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS, tool_choice=choice,
                                            max_tokens=40, temperature=0)
        assert named.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens, (first.usage, named.usage)
        assert [c.function.name for c in named.choices[0].message.tool_calls] == ["clock"], named.choices[0].message
    auto = oai.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS, max_tokens=1, temperature=0)
    assert auto.usage.prompt_tokens == named.usage.prompt_tokens      # the same prompt: every tool written


def test_a_claude_turn_naming_a_tool_reuses_the_history_and_counts_alike(claude):
    messages = [{"role": "user", "content": FIRST + "(messages)"}]
    first = claude.messages.create(model="m", max_tokens=4, system="You are a travel agent.", tools=CLAUDE_TOOLS,
                                   messages=messages, extra_body={"temperature": 0})
    messages += [{"role": "assistant", "content": first.content[0].text if first.content else "ok"},
                 {"role": "user", "content": "What time is it?"}]
    choice = {"type": "tool", "name": "clock"}
    counted = claude.messages.count_tokens(model="m", system="You are a travel agent.", tools=CLAUDE_TOOLS,
                                           messages=messages, tool_choice=choice).input_tokens
    assert counted == claude.messages.count_tokens(model="m", system="You are a travel agent.", tools=CLAUDE_TOOLS,
                                                   messages=messages).input_tokens
    with claude.messages.stream(model="m", max_tokens=40, system="You are a travel agent.", tools=CLAUDE_TOOLS,
                                messages=messages, tool_choice=choice, extra_body={"temperature": 0}) as stream:
        named = stream.get_final_message()
    first_prompt = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert named.usage.cache_read_input_tokens >= first_prompt, (first.usage, named.usage)
    assert named.usage.input_tokens + named.usage.cache_read_input_tokens == counted
    assert [b.name for b in named.content if b.type == "tool_use"] == ["clock"], named.content


def test_a_responses_turn_naming_a_function_reuses_the_history(oai):
    items: list = [{"role": "user", "content": FIRST + "(responses)"}]
    first = oai.responses.create(model="m", instructions="You are a travel agent.", input=items,
                                 tools=RESPONSES_TOOLS, max_output_tokens=4, temperature=0)
    items += [{"role": "assistant", "content": first.output_text or "ok"}, {"role": "user", "content": "What time?"}]
    named = oai.responses.create(model="m", instructions="You are a travel agent.", input=items,
                                 tools=RESPONSES_TOOLS, tool_choice={"type": "function", "name": "clock"},
                                 max_output_tokens=40, temperature=0)
    assert named.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens, (first.usage, named.usage)
    calls = [o for o in named.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["clock"], named.output
