"""Anthropic's mid-conversation tool changes (`tool_addition` / `tool_removal` blocks in a `role: "system"`
message, as the `anthropic` SDK's beta types write them; Claude Code 2.1 sends the
`mid-conversation-tool-changes-2026-07-01` beta), through the real SDK against the tiny model: each change
reads, where its message stands, as text (an added tool's definition, a line for a withdrawn one) while
the tool list the template writes first stays as the request gives it, so the next turn reuses the
whole history; the tools a demanded call may name follow the changes; bad blocks are a 400 naming them."""

from __future__ import annotations

import anthropic
import pytest
from strata.server.tool_changes import ADDED, REMOVED
from strata.server.tool_search import definitions_text

BETAS = ["mid-conversation-tool-changes-2026-07-01", "inline-tools-2026-09-15"]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
BASH = {"name": "Bash", "description": "Run a shell command.", "input_schema": SCHEMA}
WEATHER = {"name": "Weather", "description": "The weather of a city.", "input_schema": SCHEMA, "defer_loading": True}
CLOCK = {"name": "Clock", "description": "The time of a city.", "input_schema": SCHEMA}
ASK = {"role": "user", "content": "Weather in Oslo?"}


def ref(name: str) -> dict:
    return {"type": "tool_reference", "name": name}


def change(*blocks: dict, text: str | None = None) -> dict:
    return {"role": "system", "content": ([{"type": "text", "text": text}] if text else []) + list(blocks)}


ADD_WEATHER = {"type": "tool_addition", "tool": ref("Weather")}
DROP_BASH = {"type": "tool_removal", "tool": ref("Bash")}


def as_chat(tool: dict) -> dict:
    return {"type": "function", "function": {"name": tool["name"], "description": tool["description"],
                                             "parameters": tool["input_schema"]}}


def send(claude, messages, **kw):
    kw.setdefault("max_tokens", 6)
    return claude.beta.messages.create(model="local", messages=messages, betas=BETAS, tools=kw.pop("tools", [BASH, WEATHER]),
                                       extra_body={"temperature": 0}, **kw)


def count(claude, messages, tools=(BASH, WEATHER)):
    return claude.beta.messages.count_tokens(model="local", messages=messages, tools=list(tools),
                                             betas=BETAS).input_tokens


def test_each_change_reads_as_text_where_it_stands(claude, oai):
    messages = [ASK, change(DROP_BASH, ADD_WEATHER, text="Use the weather tool now.")]
    # the same prompt as chat completions with that system text, the tools as the request gives them
    text = "\n\n".join(["Use the weather tool now.", REMOVED.format(name="Bash"),
                        ADDED.format(definitions=definitions_text(["Weather"], [as_chat(WEATHER)]))])
    chat = oai.chat.completions.create(model="m", max_tokens=1, tools=[as_chat(BASH)], messages=[
        {"role": "user", "content": ASK["content"]}, {"role": "system", "content": text}])
    assert count(claude, messages) == chat.usage.prompt_tokens
    assert count(claude, [ASK, change(DROP_BASH)]) > count(claude, [ASK]) + 5
    # a tool Anthropic's MCP connector runs is nothing the model here can call: no text
    mcp = {"type": "tool_addition", "tool": {"type": "mcp_toolset_reference", "server_name": "github"}}
    assert count(claude, [ASK, change(mcp)]) == count(claude, [ASK])


def test_a_change_keeps_the_history_before_it(claude):
    """The tool list stays where the template writes it: the turn that brings the change reuses all of the
    prompt before it, and the turn after reuses the change too."""
    turn1 = [ASK]
    r1 = send(claude, turn1)
    answer = {"role": "assistant", "content": "ok"}     # a random model's bytes need not read back the same
    turn2 = turn1 + [answer, change(DROP_BASH, ADD_WEATHER), {"role": "user", "content": "And in Bergen?"}]
    r2 = send(claude, turn2)
    assert r2.usage.cache_read_input_tokens >= r1.usage.input_tokens + (r1.usage.cache_read_input_tokens or 0)
    r3 = send(claude, turn2 + [answer, {"role": "user", "content": "Thanks"}])
    assert r3.usage.cache_read_input_tokens >= r2.usage.input_tokens + r2.usage.cache_read_input_tokens


@pytest.mark.parametrize("changes,callable_", [
    ([], "Bash"),                                   # Weather is deferred: only Bash can be called
    ([DROP_BASH, ADD_WEATHER], "Weather"),          # Bash withdrawn, Weather offered
    ([{"type": "tool_addition", "tool": {"type": "tool_definition", "definition": CLOCK}}, DROP_BASH], "Clock"),
])
def test_a_demanded_call_names_a_tool_the_changes_leave(claude, changes, callable_):
    messages = [ASK, change(*changes, text="Tools changed.")]
    r = send(claude, messages, max_tokens=300, tool_choice={"type": "any"})
    (use,) = [b for b in r.content if b.type == "tool_use"]
    assert use.name == callable_ and set(use.input) == {"city"}


def test_a_compactions_tool_changes_count_too(claude):
    compacted = {"role": "assistant", "content": [{"type": "compaction", "content": "We looked at the weather.",
                                                   "tool_changes": [DROP_BASH, ADD_WEATHER]}]}
    r = send(claude, [ASK, compacted, {"role": "user", "content": "Go on."}], max_tokens=300,
             tool_choice={"type": "any"})
    assert [b.name for b in r.content if b.type == "tool_use"] == ["Weather"]


@pytest.mark.parametrize("block,needle", [
    ({"type": "tool_addition", "tool": ref("Nope")}, "messages[1].content[0].tool.name 'Nope' names no tool"),
    ({"type": "tool_addition", "tool": "Bash"}, "messages[1].content[0].tool must be an object"),
    ({"type": "tool_removal", "tool": ref("")}, "messages[1].content[0].tool.name must be a non-empty string"),
    ({"type": "tool_removal", "tool": {"type": "tool_definition", "definition": CLOCK}},
     "a tool_removal names its tool by a tool_reference"),
    ({"type": "tool_addition", "tool": {"type": "tool_definition", "definition": {"description": "x"}}},
     "messages[1].content[0].tool.definition.name must be a non-empty string"),
])
def test_a_bad_change_is_a_400_naming_it(claude, block, needle):
    with pytest.raises(anthropic.BadRequestError) as e:
        send(claude, [ASK, change(block)])
    assert needle in e.value.body["error"]["message"], e.value.body


@pytest.mark.parametrize("tool_changes", [5, "Bash", {"type": "tool_removal"}])
def test_a_compactions_tool_changes_not_an_array_is_a_400(claude, tool_changes):
    """A 500 'internal error: TypeError: 'int' object is not iterable' before (a string was read one
    character a change, each a 400 naming a character)."""
    compacted = {"role": "assistant", "content": [{"type": "compaction", "content": "Summary.",
                                                   "tool_changes": tool_changes}]}
    with pytest.raises(anthropic.BadRequestError) as e:
        send(claude, [ASK, compacted, {"role": "user", "content": "Go on."}])
    assert e.value.body["error"]["message"].startswith("messages[1].content[0].tool_changes must be an array"), \
        e.value.body
