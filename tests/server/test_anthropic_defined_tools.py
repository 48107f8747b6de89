"""Anthropic-defined tools through the real `anthropic` SDK on a live server: those the client runs (bash,
the text editor, memory) are offered to the model with the input Anthropic documents, and a call to one
comes back as a tool_use block (before, they were dropped: the model could not call them); a request
whose answer depends on a tool only Anthropic's servers run (web search ...) is a 400 saying so, and
beside client tools such a tool is left out."""

from __future__ import annotations

import logging

import anthropic
import pytest

from tests.server.live import LiveServer, sdk_clients

SCRIPT = ("Running.", "<tool_call>", '\n{"name": "bash", "arguments": {"command": "ls -la"}}\n', "</tool_call>")
ASK = [{"role": "user", "content": "List the files"}]
BASH = {"type": "bash_20250124", "name": "bash"}
EDITOR = {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}
MEMORY = {"type": "memory_20250818", "name": "memory"}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
READ = {"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {
    "path": {"type": "string"}}}}


@pytest.fixture(scope="module")
def claude(tiny_model_factory):
    """A tiny ChatML model that always answers "Running." and a bash call of `ls -la`."""
    shape = dict(ctx_len=2048, n_vocab=512, seed=3, added_tokens=SCRIPT)
    ids = (13, *range(512, 512 + len(SCRIPT)), 2)    # after the prompt's last "\n": the added tokens, <|im_end|>
    with LiveServer(model=str(tiny_model_factory(**shape, script=ids)), ctx=2048, batch=2, threads=1,
                    conversation_cache_mib=0) as s:
        yield sdk_clients(s)[1]


def test_the_bash_tool_is_offered_and_its_call_comes_back(claude):
    m = claude.messages.create(model="m", max_tokens=60, messages=ASK, tools=[BASH])
    assert [(b.name, b.input) for b in m.content if b.type == "tool_use"] == [("bash", {"command": "ls -la"})]
    assert m.stop_reason == "tool_use"
    with claude.messages.stream(model="m", max_tokens=60, messages=ASK, tools=[BASH]) as s:
        final = s.get_final_message()
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [("bash", {"command": "ls -la"})]


@pytest.mark.parametrize("tool", [BASH, EDITOR, MEMORY])
def test_each_client_run_tool_is_written_with_its_input(claude, tool):
    plain = claude.messages.count_tokens(model="m", messages=ASK).input_tokens
    assert claude.messages.count_tokens(model="m", messages=ASK, tools=[tool]).input_tokens > plain + 20


def test_a_request_made_for_a_server_tool_is_refused_saying_why(claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=20, messages=[{"role": "user", "content": "news today"}],
                               tools=[WEB_SEARCH])
    message = e.value.body["error"]["message"]
    assert message.startswith("'tools' holds only tools Strata cannot run (web_search_20250305): "
                              "Anthropic's servers run it"), message
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=20, messages=ASK, tools=[WEB_SEARCH, READ],
                               tool_choice={"type": "tool", "name": "web_search"})
    assert "'tool_choice' names 'web_search', a web_search_20250305 tool: Anthropic's servers run it" in \
        e.value.body["error"]["message"]


def test_a_server_tool_beside_client_tools_is_left_out(claude):
    both = claude.messages.count_tokens(model="m", messages=ASK, tools=[WEB_SEARCH, READ]).input_tokens
    assert both == claude.messages.count_tokens(model="m", messages=ASK, tools=[READ]).input_tokens
    m = claude.messages.create(model="m", max_tokens=60, messages=ASK, tools=[WEB_SEARCH, BASH])
    assert [b.name for b in m.content if b.type == "tool_use"] == ["bash"]
    none = claude.messages.create(model="m", max_tokens=60, messages=ASK, tools=[WEB_SEARCH],
                                  tool_choice={"type": "none"})      # nothing to run: the text answer
    assert none.content[0].type == "text"


def test_deferred_tools_are_shown_when_only_anthropics_server_search_could_load_them(claude):
    """With Anthropic's server-side tool search (which cannot run here) nothing would ever reference a
    deferred tool: every tool is shown, so the model can call it. Without it, deferral stands."""
    search = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
    deferred = {**READ, "defer_loading": True}
    shown = claude.messages.count_tokens(model="m", messages=ASK, tools=[READ]).input_tokens
    assert claude.messages.count_tokens(model="m", messages=ASK, tools=[search, deferred]).input_tokens == shown
    assert claude.messages.count_tokens(model="m", messages=ASK, tools=[deferred]).input_tokens < shown


def test_a_tool_of_an_unknown_type_is_left_out_and_said_once(claude, caplog):
    newer = {"type": "spreadsheet_20270101", "name": "sheet"}
    alone = claude.messages.count_tokens(model="m", messages=ASK, tools=[READ]).input_tokens
    with caplog.at_level(logging.WARNING, logger="strata.server"):
        for _ in range(2):
            assert claude.messages.count_tokens(model="m", messages=ASK, tools=[newer, READ]).input_tokens == alone
        claude.messages.create(model="m", max_tokens=60, messages=ASK, tools=[newer, BASH])
    said = [r.getMessage() for r in caplog.records if "spreadsheet_20270101" in r.getMessage()]
    assert len(said) == 1 and "'sheet'" in said[0] and "left out" in said[0], said
    assert not [r for r in caplog.records if "web_search" in r.getMessage()]


def test_unknown_tool_types_a_client_makes_up_do_not_grow_the_log_or_memory_without_end(claude, caplog):
    """Once per type: a client sending a new made-up type (10 KB each) with every request made the server keep
    every one for the process's life and log each in full, a 10 KB line a request. Now a bounded number of
    types is remembered and said, each cut short, then one line says the rest are not."""
    with caplog.at_level(logging.WARNING, logger="strata.server"):
        for i in range(40):
            made_up = {"type": f"made_up_{i:02d}_" + "x" * 10_000, "name": "t" * 5_000}
            claude.messages.count_tokens(model="m", messages=ASK, tools=[made_up, READ])
    said = [r.getMessage() for r in caplog.records if "made_up_" in r.getMessage() or "not said" in r.getMessage()]
    assert 1 < len(said) <= 20, len(said)
    assert "not said" in said[-1], said[-1]
    assert max(map(len, said)) < 600, max(map(len, said))
