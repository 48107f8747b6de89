"""Compaction on the Responses API, as Codex uses it when its context fills up, through the real `openai`
SDK: `POST /v1/responses/compact` and a `compaction_trigger` item, on the scripted tiny model (it always
answers "<think>Plan it</think>Warm", so the summary is "Warm"); the compaction item coming back in the
next turn's input puts the summary in the prompt; another server's item is skipped."""

from __future__ import annotations

import openai
import pytest
from strata.server.compaction import SEAL, seal, unseal, with_summaries

from tests.server.conftest import SCRIPT_ANSWER, SCRIPT_THOUGHT
from tests.server.live import LiveServer

HISTORY = [{"role": "user", "content": "fix the failing build"},
           {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
           {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": '{"cmd": "make"}'},
           {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
           {"role": "user", "content": [{"type": "input_text", "text": "now run the tests"}]}]
SHELL = {"type": "function", "name": "shell", "parameters": {"type": "object"}}


@pytest.fixture(scope="module")
def thought_tokens(scripted_model) -> int:
    """The tokens of the scripted answer's "<think>Plan it</think>"."""
    from strata.engine import Engine

    return len(Engine(str(scripted_model), n_ctx=64, n_threads=1).tokenize(f"<think>{SCRIPT_THOUGHT}</think>",
                                                                          special=True))


@pytest.fixture(scope="module")
def oai(scripted_model):
    with LiveServer(model=str(scripted_model), ctx=2048, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)


def test_compact_keeps_the_user_messages_then_one_compaction_item(oai, thought_tokens):
    r = oai.responses.compact(model="gpt-5-codex", input=HISTORY, instructions="You are Codex.",
                              extra_body={"tools": [SHELL]})
    assert r.object == "response.compaction"
    assert [o.type for o in r.output] == ["message", "message", "compaction"]
    assert [o.content[0].text for o in r.output[:2]] == ["fix the failing build", "now run the tests"]
    assert unseal(r.output[2].encrypted_content) == SCRIPT_ANSWER       # the reasoning is not the summary
    assert r.usage.input_tokens > 50 and r.usage.output_tokens > 0
    assert r.usage.output_tokens_details.reasoning_tokens == thought_tokens     # spent, though not the summary


def test_the_next_turn_reads_the_summary(oai):
    compacted = oai.responses.compact(model="m", input=HISTORY).output
    after = [o.model_dump(exclude_none=True, warnings=False) for o in compacted] + [{"role": "user", "content": "go on"}]
    without = [o for o in after if o.get("type") != "compaction"]
    with_summary = oai.responses.create(model="m", input=after, max_output_tokens=4, temperature=0)
    plain = oai.responses.create(model="m", input=without, max_output_tokens=4, temperature=0)
    assert with_summary.usage.input_tokens > plain.usage.input_tokens + 5      # the header and "Warm"
    foreign = [*without[:-1], {"type": "compaction", "id": "cmp_x", "encrypted_content": "gAAAAABpM0Yj-opaque"},
               without[-1]]
    skipped = oai.responses.create(model="m", input=foreign, max_output_tokens=4, temperature=0)
    assert skipped.usage.input_tokens == plain.usage.input_tokens


def test_a_compaction_trigger_answers_with_one_compaction_item(oai, thought_tokens):
    items = [*HISTORY, {"type": "compaction_trigger"}]
    r = oai.responses.create(model="m", input=items, tools=[SHELL])
    assert [o.type for o in r.output] == ["compaction"] and r.status == "completed"
    assert unseal(r.output[0].encrypted_content) == SCRIPT_ANSWER
    assert r.usage.output_tokens_details.reasoning_tokens == thought_tokens
    with oai.responses.stream(model="m", input=items, tools=[SHELL]) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.output_item.done", "response.completed"]
    assert [o.type for o in final.output] == ["compaction"]


def test_a_trigger_before_the_end_is_refused(oai):
    with pytest.raises(openai.BadRequestError, match="compaction_trigger must be the last input item"):
        oai.responses.create(model="m", input=[{"type": "compaction_trigger"}, *HISTORY])


def test_seal_and_summaries_in_the_system_prompt():
    assert unseal(seal("résumé: done")) == "résumé: done"
    assert unseal("gAAAA-opaque") is None and unseal(SEAL + "!!not base64") is None and unseal(None) is None
    msgs = [{"role": "system", "content": "You are Codex."}, {"role": "user", "content": "hi"}]
    out = with_summaries(msgs, ["first", "second"])
    assert out[0]["content"].startswith("You are Codex.\n\nSummary of the conversation") and out[1:] == msgs[1:]
    assert out[0]["content"].endswith("first\n\nsecond") and msgs[0]["content"] == "You are Codex."
    assert with_summaries(msgs[1:], ["s"])[0]["role"] == "system"


def test_input_tokens_counts_what_a_compaction_turn_reads(oai):
    """An input ending in `compaction_trigger` is answered from the summary prompt (the conversation, its tools,
    then the summary request): /v1/responses/input_tokens counted the plain prompt instead, the request's tokens
    short of the usage the response then reports."""
    items = [*HISTORY, {"type": "compaction_trigger"}]
    for tools in ([SHELL], []):
        counted = oai.responses.input_tokens.count(model="m", input=items, instructions="You are Codex.",
                                                   tools=tools).input_tokens
        r = oai.responses.create(model="m", input=items, instructions="You are Codex.", tools=tools)
        assert [o.type for o in r.output] == ["compaction"]
        assert counted == r.usage.input_tokens, tools
