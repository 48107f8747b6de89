"""OpenAI-API agent frameworks' requests, as they send them, through the real `openai` SDK against a live
server: the OpenAI Agents SDK 0.24.0 (Responses API by default, Chat Completions with
OpenAIChatCompletionsModel), mini-swe-agent 2.4.6 (litellm 1.110.2) and llm 0.36 were run against Strata
(docs/api.md, "Pointing agents at Strata"); the bodies here are the SHAPES they sent (fields, item types,
strict tool schemas), not their answers.

The model is a scripted tiny model that acts as an agent (tests/fixtures/tiny_gguf.py `script`): its
template writes <|answered|> into the generation prompt after a tool result, so it calls `run_tests`
when the last message is not a tool result and answers in words after one. So the framework's tool call
comes out, its output goes back in the framework's shape, the answer follows, and the second request
reuses all of the first."""

from __future__ import annotations

import json

import openai
import pytest

from tests.fixtures.bpe_vocab import CHATML_TEMPLATE
from tests.server.live import LiveServer, sdk_clients

CALL = ("<tool_call>\n", '{"name": "run_tests", "arguments": {}}', "\n</tool_call>")   # whole tokens each
FINAL = ("<|answered|>", "The tests ran:", " see the output above.")
TEMPLATE = CHATML_TEMPLATE.replace(
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if '<tool_response>' in messages[-1]['content'] %}{{ '<|answered|>' }}{% endif %}{% endif %}")
ANSWER = "The tests ran: see the output above."

# the Agents SDK's function tools: strict schemas with additionalProperties false, an empty `required`
STRICT_TOOLS = [
    {"name": "read_file", "type": "function", "strict": True, "description": "Read a file of the project.",
     "parameters": {"properties": {"path": {"title": "Path", "type": "string"}}, "required": ["path"],
                    "title": "read_file_args", "type": "object", "additionalProperties": False}},
    {"name": "run_tests", "type": "function", "strict": True, "description": "Run the project's tests.",
     "parameters": {"properties": {}, "title": "run_tests_args", "type": "object", "additionalProperties": False,
                    "required": []}}]
# every ModelSettings field the SDK sends on the Responses API, as it sends them
RESPONSES_SETTINGS = {
    "include": ["message.output_text.logprobs", "reasoning.encrypted_content"], "parallel_tool_calls": True,
    "store": False, "tool_choice": "auto", "metadata": {"a": "b"}, "prompt_cache_retention": "24h",
    "service_tier": "auto", "prompt_cache_key": "sess-1", "safety_identifier": "x", "user": "u1", "top_p": 0.9,
    "top_logprobs": 2, "reasoning": {"effort": "low", "summary": "auto"}, "truncation": "auto",
    "text": {"verbosity": "low"}, "context_management": [{"type": "compaction", "compact_threshold": 200000}]}
CHAT_SETTINGS = {
    "parallel_tool_calls": True, "store": False, "tool_choice": "auto", "metadata": {"a": "b"},
    "prompt_cache_retention": "24h", "service_tier": "auto", "prompt_cache_key": "sess-1",
    "safety_identifier": "x", "user": "u1", "top_p": 0.9, "reasoning_effort": "low", "verbosity": "low",
    "frequency_penalty": 0.1, "presence_penalty": 0.1}
USER = "calc.py has a bug: test_calc.py fails. Fix it."
INSTRUCTIONS = "You fix Python code. Use the tools."
PNG = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


def agent_model(tiny_model_factory):
    """The scripted agent model: a run_tests call, or ANSWER after a tool result."""
    from strata.engine import Engine

    shape = dict(ctx_len=4096, n_vocab=512, seed=4, added_tokens=CALL + FINAL, chat_template=TEMPLATE)
    engine = Engine(str(tiny_model_factory(**shape)), n_ctx=64, n_threads=1)
    # after the call, <|im_end|> (2) ends the turn; the answer after <|answered|> ends with <|endoftext|> (0)
    script = (*engine.tokenize("\n" + "".join(CALL), special=True), 2,
              *engine.tokenize("".join(FINAL), special=True), 0)
    return tiny_model_factory(**shape, script=script)


@pytest.fixture(scope="module")
def oai(tiny_model_factory):
    model = agent_model(tiny_model_factory)
    with LiveServer(model=str(model), ctx=4096, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)[0]


def respond(oai, input, stream=False, **kw):
    body = {"model": "local", "instructions": INSTRUCTIONS, "input": input, "tools": STRICT_TOOLS,
            "max_output_tokens": 200, "temperature": 0.0, **RESPONSES_SETTINGS, **kw}
    if not stream:
        return oai.responses.create(**body)
    events = list(oai.responses.create(**body, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    return events[-1].response


@pytest.mark.parametrize("stream", [False, True])
def test_agents_sdk_responses_turns(oai, stream):
    """Runner.run / Runner.run_streamed on OpenAIResponsesModel: the call, its output sent back as the SDK
    sends it (the function_call item with its id and status), the answer, all of turn 1 reused."""
    r1 = respond(oai, [{"role": "user", "content": USER}], stream)
    (call,) = r1.output
    assert (call.type, call.name, json.loads(call.arguments), call.status) == ("function_call", "run_tests", {},
                                                                               "completed")
    history = [{"content": USER, "role": "user"},
               {"arguments": call.arguments, "call_id": call.call_id, "name": call.name, "type": "function_call",
                "id": call.id, "status": "completed"},
               {"call_id": call.call_id, "output": "1 failed in 0.58s", "type": "function_call_output"}]
    r2 = respond(oai, history, stream)
    assert r2.output_text == ANSWER and r2.status == "completed"
    assert r2.usage.input_tokens_details.cached_tokens == r1.usage.input_tokens + r1.usage.output_tokens
    # the next user turn, the answer sent back as the SDK's to_input_list() writes it
    r3 = respond(oai, history + [{"id": r2.output[0].id, "type": "message", "role": "assistant", "status": "completed",
                                  "content": [{"annotations": [], "text": ANSWER, "type": "output_text"}]},
                                 {"role": "user", "content": "Now run them again."}], stream)
    assert r3.output[0].type == "function_call"
    # all of turn 2's prompt is reused but its last token, <|answered|>, which the template writes only there
    assert r3.usage.input_tokens_details.cached_tokens == r2.usage.input_tokens - 1


@pytest.mark.parametrize("stream", [False, True])
def test_agents_sdk_chat_completions_turns(oai, stream):
    """OpenAIChatCompletionsModel: the same two requests on /v1/chat/completions (tools as functions, the
    assistant's content None beside its tool_calls, the SDK's stream_options only when asked)."""
    tools = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters", "strict")}}
             for t in STRICT_TOOLS]
    msgs = [{"content": INSTRUCTIONS, "role": "system"}, {"role": "user", "content": USER}]

    def ask(messages):
        body = {"model": "local", "messages": messages, "tools": tools, "max_tokens": 200, "temperature": 0.0,
                **CHAT_SETTINGS}
        if not stream:
            r = oai.chat.completions.create(**body)
            return r.choices[0].message, r.usage
        chunks = list(oai.chat.completions.create(**body, stream=True, stream_options={"include_usage": True}))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        calls = [tc for d in deltas for tc in (d.tool_calls or [])]
        message = {"content": "".join(d.content or "" for d in deltas) or None,
                   "tool_calls": [{"id": calls[0].id, "type": "function", "function": {
                       "name": calls[0].function.name, "arguments": "".join(tc.function.arguments or "" for tc in calls)}}]
                   if calls else None}
        return openai.types.chat.ChatCompletionMessage(role="assistant", **message), chunks[-1].usage

    m1, u1 = ask(msgs)
    (call,) = m1.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("run_tests", {})
    msgs += [{"role": "assistant", "content": None, "tool_calls": [
                 {"id": call.id, "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": call.id, "content": "1 failed in 0.58s"}]
    m2, u2 = ask(msgs)
    assert m2.content == ANSWER and not m2.tool_calls
    assert u2.prompt_tokens_details.cached_tokens == u1.prompt_tokens + u1.completion_tokens


@pytest.mark.parametrize("field,value", [("conversation", "conv_123"),
                                         ("prompt", {"id": "pmpt_1", "version": "2"})])
def test_server_side_state_by_id_is_a_400_that_says_why(oai, field, value):
    """Runner.run(conversation_id=...) sends only the new items with `conversation`; a stored prompt
    template stands for the instructions. Ignored, the answer would silently lose the history."""
    with pytest.raises(openai.BadRequestError) as e:
        respond(oai, [{"role": "user", "content": "and again"}], **{field: value})
    assert e.value.body["param"] == field and "this server keeps no" in e.value.body["message"]


def test_an_image_a_tool_returned_is_a_note_not_a_400(oai):
    """A function tool returning [ToolOutputText, ToolOutputImage] (a screenshot): the Agents SDK sends
    the image inside function_call_output; refused, every later turn of the run was the same 400."""
    call = {"type": "function_call", "call_id": "call_1", "name": "run_tests", "arguments": "{}", "id": "fc_1",
            "status": "completed"}

    def with_output(*parts):
        return [{"role": "user", "content": USER}, call,
                {"type": "function_call_output", "call_id": "call_1",
                 "output": [{"type": "input_text", "text": "report:"}, *parts]}]

    r = respond(oai, with_output({"type": "input_image", "image_url": PNG}))
    noted = respond(oai, with_output({"type": "input_text", "text": "[input_image omitted: this model reads text only]"}))
    assert r.output_text == ANSWER and r.usage.input_tokens == noted.usage.input_tokens
    # the same in a chat completions tool message
    msgs = [{"role": "user", "content": USER}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]}]
    img = oai.chat.completions.create(model="local", max_tokens=20, temperature=0, messages=msgs + [
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "report:"},
                                                               {"type": "image_url", "image_url": {"url": PNG}}]}])
    text = oai.chat.completions.create(model="local", max_tokens=20, temperature=0, messages=msgs + [
        {"role": "tool", "tool_call_id": "call_1", "content": "report:[image_url omitted: this model reads text only]"}])
    assert img.choices[0].message.content == ANSWER and img.usage.prompt_tokens == text.usage.prompt_tokens
    # an image the user sends is still refused, naming the part
    with pytest.raises(openai.BadRequestError, match=r"input\[0\].content\[0\]: input_image parts are not supported"):
        respond(oai, [{"role": "user", "content": [{"type": "input_image", "image_url": PNG}]}])


def test_mini_swe_agent_and_llm_shapes(oai):
    """mini-swe-agent's LitellmModel (chat, its one `bash` tool, no tool_choice) and LitellmResponseModel
    (litellm.responses: a system message in `input`, no `instructions`), and llm's streamed chat with
    stream_options.include_usage; each a call, then the answer after the call's output."""
    bash = {"name": "run_tests", "description": "Execute a bash command", "parameters": {
        "type": "object", "properties": {"command": {"type": "string", "description": "The bash command"}},
        "required": ["command"]}}
    system, task = {"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": USER}
    r = oai.chat.completions.create(model="local", temperature=0, messages=[system, task],
                                    tools=[{"type": "function", "function": bash}])
    (call,) = r.choices[0].message.tool_calls
    after = oai.chat.completions.create(model="local", temperature=0, tools=[{"type": "function", "function": bash}],
                                        messages=[system, task, r.choices[0].message.model_dump(exclude_none=True),
                                                  {"role": "tool", "tool_call_id": call.id,
                                                   "content": '{"returncode": 0, "output": "1 passed"}'}])
    assert after.choices[0].message.content == ANSWER
    resp = oai.responses.create(model="local", temperature=0, input=[system, task], tools=[{"type": "function", **bash}])
    assert resp.output[0].type == "function_call" and resp.instructions is None
    chunks = list(oai.chat.completions.create(model="local", messages=[task], stream=True,
                                              stream_options={"include_usage": True},
                                              tools=[{"type": "function", "function": bash}]))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3


def test_llm_schema_without_additional_properties_gets_its_keys(tiny_server):
    """`llm --schema 'name, age int'` sends a schema that lists properties and says nothing of others (as
    LangChain's and most hand-written ones do). Held as JSON Schema's open object, a small model wrote keys of
    its own and nested objects until max_tokens (SmolLM2: 4,096 tokens, never JSON); closed, as llama.cpp
    holds it, the answer has the keys asked for."""
    oai = sdk_clients(tiny_server)[0]
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    for seed in range(4):
        chunks = list(oai.chat.completions.create(
            model="local", messages=[{"role": "user", "content": "invent a dog"}], stream=True, seed=seed,
            max_tokens=200, stream_options={"include_usage": True},
            response_format={"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert set(json.loads(text)) == {"name", "age"}, text


def test_chat_prompt_cache_key_names_the_conversation(tiny_server):
    """The Agents SDK's extra_args (and OpenAI's chat API) carry prompt_cache_key on chat completions too:
    the conversation is named by it, as on the Responses API (/v1/slots shows the name), so two sessions
    that start alike are two conversations. Chat completions named it from the first messages only."""
    import hashlib

    import httpx2 as httpx

    oai = sdk_clients(tiny_server)[0]
    msgs = [{"role": "system", "content": "You are a subagent."}, {"role": "user", "content": "look around"}]
    for key in ("agent-a", "agent-b"):
        oai.chat.completions.create(model="m", messages=msgs, max_tokens=2, temperature=0, prompt_cache_key=key)
        named = hashlib.sha256(b"prompt_cache_key\x00" + key.encode()).hexdigest()[:12]
        slots = httpx.get(tiny_server.url + "/v1/slots", timeout=10).json()["slots"]
        assert named in [s.get("conversation") for s in slots], slots
