"""Seed-OSS agent turns end to end, through the real `openai` and `anthropic` SDKs and the Responses API, on a
scripted tiny model (tests/fixtures/tiny_gguf.py `script`: real weights, known output, llama's layers: the
seed_oss engine is tested apart) with Seed-OSS's real template (tests/fixtures/) and its "seed-coder"
pre-tokenizer. The model answers `<seed:think>Need ls.</seed:think>\\nLet me look.\\n\\n<seed:tool_call>\\n
<function=bash>\\n<parameter=command>ls -la</parameter>\\n<parameter=timeout>30</parameter>\\n</function>\\n
</seed:tool_call>`: reasoning, text and the typed call come out apart in each API, streamed and not, with no
markup; the call and reasoning go back and the second turn reuses all of the first; a cut call says
"length" / "max_tokens" and comes back as a cut call (its arguments as far as written), never its markup as
text (test_cut_calls_seed.py reads the cuts one by one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.server.live import LiveServer, check_cut_call, check_reasoning_text_and_call, sdk_clients

TEMPLATE = (Path(__file__).resolve().parents[1] / "fixtures" / "ByteDance-Seed-OSS.jinja").read_text(encoding="utf-8")
# each piece one token (the script's tokens must all differ); the prompt ends with "assistant\n"
PIECES = ("<seed:think>", "Need ls.", "</seed:think>", "\nLet me look.\n\n", "<seed:tool_call>", "\n<function=bash>\n",
          "<parameter=command>ls -la</parameter>\n", "<parameter=timeout>30</parameter>\n", "</function>\n",
          "</seed:tool_call>")
MARKUP = ("<seed:bos>", "<seed:eos>", "<seed:think>", "</seed:think>", "<seed:tool_call>", "</seed:tool_call>",
          "<function=", "<parameter=")
ADDED = tuple(dict.fromkeys(("<seed:bos>", "<seed:eos>", "assistant\n") + PIECES))
PARAMS = {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
          "required": ["command"]}
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command.", "parameters": PARAMS}}]
CLAUDE_TOOLS = [{"name": "bash", "description": "Run a command.", "input_schema": PARAMS}]
RESPONSES_TOOLS = [{"type": "function", "name": "bash", "description": "Run a command.", "parameters": PARAMS}]
MSGS = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "list the files"}]
ARGS = {"command": "ls -la", "timeout": 30}


@pytest.fixture(scope="module")
def served(tiny_model_factory):
    from strata.engine import Engine

    shape = dict(ctx_len=4096, n_vocab=512, seed=6, tokenizer_pre="seed-coder", added_tokens=ADDED,
                 chat_template=TEMPLATE)
    probe = Engine(str(tiny_model_factory(**shape)), n_ctx=64, n_threads=1)
    ids = probe.tokenize("assistant\n" + "".join(PIECES), special=True)
    assert len(ids) == len(PIECES) + 1, "each piece must be one token"
    # every message opens with <seed:bos>: the conversation cache's anchors
    assert probe.tokenizer.token_id("<seed:bos>") in probe.message_opener_ids
    model = tiny_model_factory(**shape, script=(*ids, probe.tokenizer.eos_id))
    with LiveServer(model=str(model), ctx=4096, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


def test_openai_reasoning_text_and_typed_call_then_the_first_turn_reused(served):
    oai, _ = served
    check_reasoning_text_and_call(oai, MSGS, TOOLS, ARGS)


def test_anthropic_and_responses_thinking_text_and_call(served):
    oai, claude = served
    m = claude.messages.create(model="m", max_tokens=40, system="You are a coding agent.", messages=MSGS[1:],
                               tools=CLAUDE_TOOLS, extra_body={"temperature": 0})
    assert [b.type for b in m.content] == ["thinking", "text", "tool_use"] and m.stop_reason == "tool_use"
    assert (m.content[0].thinking, m.content[1].text, m.content[2].input) == ("Need ls.", "Let me look.", ARGS)
    events = list(oai.responses.create(model="m", input="list the files", tools=RESPONSES_TOOLS,
                                       max_output_tokens=40, stream=True))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.type for i in done] == ["reasoning", "message", "function_call"]
    assert json.loads(done[2].arguments) == ARGS
    texts = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(texts) == "Let me look." and not any(mk in t for t in texts for mk in MARKUP)


@pytest.mark.parametrize(("cut", "arguments"), [
    (1, '{"command": "ls -la", "timeout": 30}'),    # before </seed:tool_call> (</function> closed the object)
    (3, '{"command": "ls -la"'),                    # after the first value
    (4, ""),                                        # after the function's name
    (5, None)])                                     # after <seed:tool_call>: no call, no markup
def test_a_cut_call_says_length_and_comes_back_as_a_cut_call(served, cut, arguments):
    oai, claude = served
    check_cut_call(oai, claude, MSGS, TOOLS, CLAUDE_TOOLS, RESPONSES_TOOLS, cut, arguments)


@pytest.mark.parametrize("budget", ["512", None, [512]])
def test_a_thinking_budget_the_template_cannot_use_is_named(served, budget):
    """thinking_budget of another type than the template's integer: a 400 naming the variable and value and
    chat_template_kwargs, not blaming the messages (they render without it); 512 renders."""
    import openai

    oai, _ = served
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="m", messages=MSGS, max_tokens=1,
                                    extra_body={"chat_template_kwargs": {"thinking_budget": budget}})
    message = str(err.value)
    assert f"thinking_budget={budget!r}" in message and "chat_template_kwargs" in message
    assert "these messages" not in message
    ok = oai.chat.completions.create(model="m", messages=MSGS, max_tokens=1,
                                     extra_body={"chat_template_kwargs": {"thinking_budget": 512}})
    assert ok.choices[0].finish_reason == "length"


def test_an_anthropic_thinking_budget_is_told_to_the_template(served):
    """`thinking: {"type": "enabled", "budget_tokens": N}` renders Seed-OSS's budget system message ("...the
    thinking budget, which is N...") as `chat_template_kwargs: {"thinking_budget": N}` does on the OpenAI API:
    the model paces its reasoning by it (the server cuts it at N either way)."""
    oai, claude = served
    plain = claude.messages.count_tokens(model="m", system="You are a coding agent.", messages=MSGS[1:],
                                         tools=CLAUDE_TOOLS).input_tokens
    told = claude.messages.count_tokens(model="m", system="You are a coding agent.", messages=MSGS[1:],
                                        tools=CLAUDE_TOOLS,
                                        thinking={"type": "enabled", "budget_tokens": 2048}).input_tokens
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=1,
                                    extra_body={"chat_template_kwargs": {"thinking_budget": 2048}})
    assert told > plain
    assert told == r.usage.prompt_tokens
    adaptive = claude.messages.count_tokens(model="m", system="You are a coding agent.", messages=MSGS[1:],
                                            tools=CLAUDE_TOOLS, thinking={"type": "adaptive"}).input_tokens
    assert adaptive == plain                                    # no budget: the template's default

