"""Requests in the shape Claude Code 2.1.332 sends them (recorded from the real CLI against Strata: field
names, block types, headers; the text here is ours), through the real `anthropic` SDK's beta client
(`POST /v1/messages?beta=true` with the `anthropic-beta` header, as the CLI posts) to a live server on
the tiny model.

Claude Code 2.1 puts its environment (working directory, platform, date) in a `role: "system"` message
after the first user turn: Anthropic's mid-conversation system messages. Every request of the CLI's
session carries one, so a server that refuses the role answers every request with a 400."""

from __future__ import annotations

import json
import time

import anthropic
import pytest

# the betas and extra fields of the CLI's main-conversation requests
BETAS = ["claude-code-20250219", "interleaved-thinking-2025-05-14", "context-management-2025-06-27",
         "mid-conversation-tool-changes-2026-07-01", "advanced-tool-use-2025-11-20", "effort-2025-11-24"]
CLI_FIELDS = {"metadata": {"user_id": '{"device_id":"0a1e","account_uuid":"","session_id":"5f0c"}'},
              "thinking": {"type": "adaptive", "display": "updates"},
              "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
              "output_config": {"effort": "high"}, "temperature": 0}
CLI_HEADERS = {"x-app": "cli", "X-Claude-Code-Session-Id": "5f0c", "anthropic-dangerous-direct-browser-access": "true"}
SYSTEM = [{"type": "text", "text": "You are a coding agent."},
          {"type": "text", "text": "Work in small steps.", "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "Bash", "description": "Run a shell command.",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
         {"name": "Placeholder", "description": "Never call this.", "input_schema": {"type": "object", "properties": {}},
          "defer_loading": True}]
ENVIRONMENT = "# Environment\n - Primary working directory: /tmp/work\n - Platform: linux\n\nToday's date is 2026-12-02."
FIRST_USER = {"role": "user", "content": [{"type": "text", "text": "<system-reminder>\nBe brief.\n</system-reminder>\n"},
                                          {"type": "text", "text": "List the files"}]}
ENV_MESSAGE = {"role": "system", "content": [{"type": "text", "text": ENVIRONMENT, "cache_control": {"type": "ephemeral"}}]}


def cli_request(claude, messages, max_tokens=6):
    """One streamed request as the CLI sends it; the final message."""
    with claude.beta.messages.stream(model="local", max_tokens=max_tokens, system=SYSTEM, tools=TOOLS,
                                     messages=messages, betas=BETAS, extra_headers=CLI_HEADERS,
                                     extra_body=CLI_FIELDS) as stream:
        return stream.get_final_message()


def count(claude, messages):
    return claude.messages.count_tokens(model="local", messages=messages).input_tokens


def test_the_clis_first_request_is_answered_and_reads_the_system_message_as_a_system_turn(claude, oai):
    message = cli_request(claude, [FIRST_USER, ENV_MESSAGE])
    assert message.role == "assistant" and message.stop_reason in ("end_turn", "max_tokens")
    # the mid-conversation system message is rendered where it stands, as the template writes a system turn
    as_chat = [{"role": "user", "content": "<system-reminder>\nBe brief.\n</system-reminder>\nList the files"},
               {"role": "system", "content": ENVIRONMENT}]
    chat = oai.chat.completions.create(model="m", messages=as_chat, max_tokens=1, temperature=0)
    assert count(claude, [FIRST_USER, ENV_MESSAGE]) == chat.usage.prompt_tokens
    assert count(claude, [FIRST_USER, ENV_MESSAGE]) > count(claude, [FIRST_USER]) + 20


def test_the_next_turn_reuses_the_history_with_the_system_message_in_it(claude):
    turn1 = [FIRST_USER, ENV_MESSAGE]
    r1 = cli_request(claude, turn1)
    answer = [{"type": "text", "text": "".join(b.text for b in r1.content if b.type == "text") or "ok"}]
    turn2 = turn1 + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Now the tests"}]
    r2 = cli_request(claude, turn2)
    first_prompt = r1.usage.input_tokens + (r1.usage.cache_read_input_tokens or 0)
    assert r2.usage.cache_read_input_tokens >= first_prompt, (r1.usage, r2.usage)


def test_a_system_message_cleared_at_the_next_user_message_is_shown_until_then(claude):
    fleeting = {"role": "system", "content": "Answer in French this turn.", "clear_at": "next_user_message"}
    kept = {**fleeting, "clear_at": "never"}
    later = [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    assert count(claude, [FIRST_USER, fleeting]) == count(claude, [FIRST_USER, kept]) > count(claude, [FIRST_USER])
    assert count(claude, [FIRST_USER, fleeting, *later]) == count(claude, [FIRST_USER, *later])
    assert count(claude, [FIRST_USER, kept, *later]) > count(claude, [FIRST_USER, *later])


def test_tool_change_blocks_in_a_system_message_are_read_after_its_text(claude):
    """(tests/server/test_tool_changes.py has the rest.)"""
    changes = {"role": "system", "content": [
        {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Bash"}},
        {"type": "text", "text": ENVIRONMENT},
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "Bash"}}]}
    with_tools = dict(tools=TOOLS, betas=BETAS)
    n_env = claude.beta.messages.count_tokens(model="local", messages=[FIRST_USER, ENV_MESSAGE], **with_tools)
    n_changes = claude.beta.messages.count_tokens(model="local", messages=[FIRST_USER, changes], **with_tools)
    assert n_changes.input_tokens > n_env.input_tokens + 20      # a line for the removal, Bash's definition


@pytest.mark.parametrize("messages,needle", [
    ([FIRST_USER, {**ENV_MESSAGE, "clear_at": "later"}], "messages[1].clear_at must be one of 'next_user_message', "
                                                         "'never'; got 'later'"),
    ([FIRST_USER, {"role": "system", "content": [{"type": "image", "source": {}}]}], "messages[1].content[0]: image"),
    ([ENV_MESSAGE], "'messages' holds only system messages: it needs a user message to answer"),
    ([FIRST_USER, {"role": "developer", "content": "x"}], "messages[1].role must be 'user', 'assistant' or 'system'"),
])
def test_a_bad_system_message_is_a_400_naming_it(claude, messages, needle):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="local", max_tokens=4, messages=messages)
    assert needle in e.value.body["error"]["message"]


def test_the_interactive_clis_title_request_gets_its_json(claude):
    """The interactive CLI's side request that names the session: no tools (an empty list), the answer held
    to a JSON schema through `output_config.format`, and a `safeguards` field the server has no use for."""
    schema = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 40}}, "required": ["title"],
              "additionalProperties": False}
    fields = {**CLI_FIELDS, "tools": [], "output_config": {"effort": "high", "format": {"type": "json_schema",
                                                                                        "schema": schema}},
              "safeguards": [{"type": "dangerous_tool_use", "classifier_context": {"v": 1, "platform": "linux"}}]}
    fields.pop("thinking")
    with claude.beta.messages.stream(model="local", max_tokens=32000, system=SYSTEM,
                                     messages=[{"role": "user", "content": "Name this session: list the files"}],
                                     betas=BETAS + ["structured-outputs-2025-12-15"], extra_headers=CLI_HEADERS,
                                     extra_body=fields) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "end_turn", message
    title = json.loads(message.content[0].text)
    assert set(title) == {"title"} and isinstance(title["title"], str)


def test_a_prompt_too_long_for_the_context_is_logged_with_the_fix(claude, caplog):
    """Claude Code shows its own wording of the 400 ("Prompt is too long · the request is ~12364 tokens
    (limit 8191) ..."), without the server's advice; the server's log says it."""
    with caplog.at_level("WARNING", logger="strata.server"), pytest.raises(anthropic.BadRequestError) as e:
        cli_request(claude, [{"role": "user", "content": "word " * 5000}, ENV_MESSAGE])
    assert e.value.body["error"]["message"].startswith("prompt is too long: ")
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and refused[0].startswith("POST /v1/messages refused: prompt is too long: ")
    assert refused[0].endswith("the model was trained on 4096 tokens, so a larger --ctx would give unreliable answers: "
                               "shorten the conversation)")


# ----- tool search: deferred tools and tool_reference results -----

WEB_FETCH = {"name": "WebFetch", "description": "Fetch a web page.", "defer_loading": True,
             "input_schema": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}}
TOOL_SEARCH = {"name": "ToolSearch", "description": "Load deferred tools.",
               "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}
SEARCH_CALL = {"role": "assistant", "content": [{"type": "text", "text": "Searching."}, {
    "type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {"query": "select:WebFetch"}}]}


def search_result(content):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content,
                                         "cache_control": {"type": "ephemeral"}}]}


def count_with_tools(claude, messages, tools):
    return claude.beta.messages.count_tokens(model="local", messages=messages, tools=tools, betas=BETAS).input_tokens


def test_a_deferred_tool_is_not_shown_until_a_reference_loads_it(claude):
    """Claude Code 2.1.332 answers its ToolSearch call with a `tool_reference` block (it was a 400,
    "type 'tool_reference' is not supported", and the CLI fell back to sending every tool, the whole
    prompt read again) and adds the tool to `tools` with `defer_loading`."""
    turn = [FIRST_USER, SEARCH_CALL]
    assert count_with_tools(claude, [FIRST_USER], [TOOL_SEARCH, WEB_FETCH]) == \
        count_with_tools(claude, [FIRST_USER], [TOOL_SEARCH])
    loaded = turn + [search_result([{"type": "tool_reference", "tool_name": "WebFetch"}])]
    definition = ('<functions>\n<function>{"description": "Fetch a web page.", "name": "WebFetch", "parameters": '
                  + json.dumps(WEB_FETCH["input_schema"]) + '}</function>\n</functions>')
    as_text = turn + [search_result([{"type": "text", "text": definition}])]
    assert count_with_tools(claude, loaded, [TOOL_SEARCH, WEB_FETCH]) == count_with_tools(claude, as_text,
                                                                                           [TOOL_SEARCH])


def test_loading_a_deferred_tool_keeps_the_history(claude):
    r1 = cli_request_with(claude, [FIRST_USER, ENV_MESSAGE], [TOOL_SEARCH])
    turn2 = [FIRST_USER, ENV_MESSAGE, SEARCH_CALL, search_result([{"type": "tool_reference", "tool_name": "WebFetch"}])]
    r2 = cli_request_with(claude, turn2, [TOOL_SEARCH, WEB_FETCH])
    # the tool list the prompt starts with did not change: the first turn's whole prompt is reused
    assert r2.usage.cache_read_input_tokens >= r1.usage.input_tokens + r1.usage.cache_read_input_tokens


def test_a_reference_to_a_tool_not_in_the_request_reads_as_a_note(claude):
    loaded = [FIRST_USER, SEARCH_CALL, search_result([{"type": "tool_reference", "tool_name": "Nope"}])]
    note = [FIRST_USER, SEARCH_CALL, search_result("<functions>\n[tool 'Nope' is not among this request's tools]"
                                                   "\n</functions>")]
    assert count_with_tools(claude, loaded, [TOOL_SEARCH]) == count_with_tools(claude, note, [TOOL_SEARCH])
    with pytest.raises(anthropic.BadRequestError) as e:
        count_with_tools(claude, [FIRST_USER, SEARCH_CALL, search_result([{"type": "tool_reference"}])], [TOOL_SEARCH])
    assert "messages[2].content[0].content[0].tool_name must be a non-empty string" in e.value.body["error"]["message"]


def test_a_loaded_deferred_tool_can_be_called():
    from strata.server.tool_search import shown_and_callable

    tools = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("ToolSearch", "WebFetch")]
    shown, callable_ = shown_and_callable(tools, frozenset({"WebFetch"}), frozenset())
    assert [t["function"]["name"] for t in shown] == [t["function"]["name"] for t in callable_] == ["ToolSearch"]
    shown, callable_ = shown_and_callable(tools, frozenset({"WebFetch"}), frozenset({"WebFetch"}))
    assert [t["function"]["name"] for t in shown] == ["ToolSearch"]
    assert [t["function"]["name"] for t in callable_] == ["ToolSearch", "WebFetch"]


def cli_request_with(claude, messages, tools, max_tokens=4):
    with claude.beta.messages.stream(model="local", max_tokens=max_tokens, system=SYSTEM, tools=tools,
                                     messages=messages, betas=BETAS, extra_headers=CLI_HEADERS,
                                     extra_body=CLI_FIELDS) as stream:
        return stream.get_final_message()


def test_a_stream_reading_a_long_prompt_sends_pings(tiny_model_factory, monkeypatch):
    """Claude Code drops a stream silent for 300 s (its stream watchdog): while a long prompt is read (here
    8 tokens a step, about 12,000 tokens) the stream sends `ping` events every PING_EVERY_S (0.05 s here);
    before, one ping after message_start, then nothing until the answer."""
    import httpx2 as httpx
    from strata.server import anthropic_api

    from tests.server.live import LiveServer

    monkeypatch.setattr(anthropic_api, "PING_EVERY_S", 0.05)
    model = tiny_model_factory(ctx_len=16384, n_vocab=512, seed=3)
    with LiveServer(model=str(model), ctx=16384, batch=0, threads=1, prefill_chunk=8,
                    conversation_cache_mib=0) as server:
        body = {"model": "local", "max_tokens": 2, "stream": True,
                "messages": [{"role": "user", "content": "word " * 6000}]}
        events = []
        with httpx.stream("POST", server.url + "/v1/messages", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    events.append((line[7:], time.monotonic()))
    names = [e for e, _ in events]
    first_block = names.index("content_block_start")
    assert names[0] == "message_start" and names[-1] == "message_stop"
    pings = [t for e, t in events[:first_block] if e == "ping"]
    assert len(pings) >= 3, names[:first_block]
    assert max(b - a for a, b in zip(pings, pings[1:], strict=False)) < 1.0     # no long silence while reading


def test_a_stream_waiting_in_the_queue_begins_and_pings(tiny_server, monkeypatch):
    """Claude Code also drops a request whose answer has not begun after 300 s: a request waiting for a
    context (or for another request's read of the same start) begins its stream after PING_EVERY_S and
    pings until it runs; the end still carries its real usage."""
    import threading

    import httpx2 as httpx
    from strata.server import anthropic_api

    monkeypatch.setattr(anthropic_api, "PING_EVERY_S", 0.05)
    sched = tiny_server.state.scheduler
    held, release = threading.Event(), threading.Event()
    gate = sched.call(lambda: (held.set(), release.wait(60)))      # the worker takes no request meanwhile
    assert held.wait(30)
    events, released_at = [], []
    body = {"model": "local", "max_tokens": 2, "stream": True, "messages": [{"role": "user", "content": "hi"}]}

    def read() -> None:
        with httpx.stream("POST", tiny_server.url + "/v1/messages", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    events.append((line[7:], time.monotonic()))
                elif line.startswith("data: ") and '"message_delta"' in line:
                    events.append((json.loads(line[6:])["usage"], time.monotonic()))

    reader = threading.Thread(target=read)
    reader.start()
    # released once the stream has begun and pinged 3 times (a fixed 1.5 s wait could end before the
    # request even reached the server on a loaded machine); a stream that never does fails the asserts below
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and [e for e, _ in events].count("ping") < 3:
        time.sleep(0.02)
    released_at.append(time.monotonic())
    release.set()
    gate.result(30)
    reader.join(60)
    before = [e for e, t in events if t < released_at[0]]
    assert before[:1] == ["message_start"] and before.count("ping") >= 3, before
    usage = next(e for e, _ in events if isinstance(e, dict))
    n_prompt = httpx.post(tiny_server.url + "/v1/messages/count_tokens", json=body, timeout=60).json()["input_tokens"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == n_prompt
