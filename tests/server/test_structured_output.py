"""`response_format` / `text.format` against live servers with the real `openai` SDK: JSON answers held to
their schema while they are generated, on the tiny random model (whose free answers are gibberish, so
only the constraint can make them JSON) and on the default model; schemas that cannot be enforced are a
400 naming the keyword; with tools offered nothing is enforced."""

from __future__ import annotations

import json
import re

import openai
import pytest

from tests.server.live import LiveServer

PET = {"type": "object", "additionalProperties": False, "required": ["kind", "legs", "friendly"],
       "properties": {"kind": {"enum": ["cat", "dog", "bird"]}, "legs": {"type": "integer"},
                      "friendly": {"type": "boolean"}, "name": {"type": "string", "maxLength": 10}}}
PET_FORMAT = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET, "strict": True}}


def check_pet(text: str) -> dict:
    value = json.loads(text)
    assert set(value) >= {"kind", "legs", "friendly"} and set(value) <= set(PET["properties"])
    assert value["kind"] in ("cat", "dog", "bird") and type(value["legs"]) is int
    assert isinstance(value["friendly"], bool)
    assert len(value.get("name", "")) <= 10
    return value


def ask(client, **kw):
    kw.setdefault("messages", [{"role": "user", "content": "Describe a pet as JSON."}])
    kw.setdefault("max_tokens", 200)
    return client.chat.completions.create(model="m", **kw)


@pytest.mark.parametrize("temperature", [0, 0.9])
def test_json_schema_answers_follow_the_schema(oai, temperature):
    free = ask(oai, temperature=0, max_tokens=40).choices[0].message.content
    with pytest.raises(ValueError):
        json.loads(free)                    # the random model, left alone, writes no JSON
    for seed in range(3):
        r = ask(oai, temperature=temperature, seed=seed, response_format=PET_FORMAT)
        assert r.choices[0].finish_reason == "stop"
        check_pet(r.choices[0].message.content)


def test_a_streamed_json_answer_is_the_same_json(oai):
    whole = ask(oai, temperature=0, response_format=PET_FORMAT).choices[0].message.content
    chunks = list(ask(oai, temperature=0, response_format=PET_FORMAT, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole
    check_pet(whole)


def test_dates_patterns_and_bounds_are_held(oai):
    """Pydantic-style constraints (a date, a pattern, bounded numbers) hold the random model's answer."""
    schema = {"type": "object", "additionalProperties": False, "required": ["day", "code", "score", "count"],
              "properties": {"day": {"type": "string", "format": "date"},
                             "code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"},
                             "score": {"type": "number", "minimum": 0, "maximum": 1},
                             "count": {"type": "integer", "exclusiveMinimum": 0, "maximum": 9}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "record", "schema": schema, "strict": True}}
    for seed in range(3):
        r = ask(oai, temperature=0.9, seed=seed, max_tokens=300, response_format=fmt)
        assert r.choices[0].finish_reason == "stop"
        value = json.loads(r.choices[0].message.content)
        assert re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", value["day"])
        assert re.fullmatch(r"[A-Z]{3}-[0-9]{2}", value["code"])
        assert 0 <= value["score"] <= 1 and type(value["count"]) is int and 1 <= value["count"] <= 9


def test_json_object_gives_an_object(oai):
    r = ask(oai, temperature=0.7, seed=1, max_tokens=300, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:       # cut at max_tokens: still a prefix of an object
        assert r.choices[0].message.content.lstrip().startswith("{")


@pytest.mark.parametrize("fmt, words", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "ipv6"}}},
     "schema.format: the format 'ipv6' is not supported"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "multipleOf": 2}}},
     "schema.multipleOf is not supported"),
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "'response_format.json_schema.schema' is required"),
    ({"type": "xml"}, "'response_format.type' must be 'text', 'json_object' or 'json_schema'"),
    ("json", "'response_format' must be an object"),
])
def test_formats_that_cannot_be_enforced_are_refused(oai, fmt, words):
    with pytest.raises(openai.BadRequestError) as e:
        ask(oai, response_format=fmt)
    assert words in e.value.message


def test_with_tools_offered_nothing_is_enforced(oai):
    tool = {"type": "function", "function": {"name": "get_pet", "parameters": {"type": "object", "properties": {}}}}
    plain = ask(oai, temperature=0, max_tokens=30, tools=[tool])
    held = ask(oai, temperature=0, max_tokens=30, tools=[tool], response_format=PET_FORMAT)
    assert held.choices[0].message.content == plain.choices[0].message.content


def test_completions_take_response_format(oai):
    r = oai.completions.create(model="m", prompt="A pet as JSON:", temperature=0, max_tokens=200,
                               extra_body={"response_format": PET_FORMAT})
    assert r.choices[0].finish_reason == "stop"
    check_pet(r.choices[0].text)


def test_responses_text_format(oai):
    r = oai.responses.create(model="m", input="Describe a pet as JSON.", temperature=0, max_output_tokens=200,
                             text={"format": {"type": "json_schema", "name": "pet", "schema": PET, "strict": True}})
    assert r.status == "completed"
    check_pet(r.output_text)
    assert r.text.format.type == "json_schema"


@pytest.fixture(scope="module")
def smol(default_model_path):
    with LiveServer(model=str(default_model_path), ctx=2048, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_the_default_model_fills_in_the_schema(smol):
    r = ask(smol, temperature=0, messages=[
        {"role": "system", "content": "Answer in JSON."},
        {"role": "user", "content": "A dog named Rex with four legs who loves people. Describe it."}],
        response_format=PET_FORMAT)
    value = check_pet(r.choices[0].message.content)
    assert value["kind"] == "dog"


@pytest.mark.parametrize("field", ["output_config", "output_format"])
def test_anthropic_output_format(claude, field):
    fmt = {"type": "json_schema", "schema": PET}
    body = {"output_config": {"format": fmt}} if field == "output_config" else {"output_format": fmt}
    r = claude.messages.create(model="m", max_tokens=200, extra_body={**body, "temperature": 0},
                               messages=[{"role": "user", "content": "Describe a pet as JSON."}])
    assert r.stop_reason == "end_turn"
    check_pet(r.content[0].text)


def test_anthropic_prefill_is_the_start_of_the_json(claude):
    body = {"output_config": {"format": {"type": "json_schema", "schema": PET}}, "temperature": 0}
    r = claude.messages.create(model="m", max_tokens=200, extra_body=body,
                               messages=[{"role": "user", "content": "Describe a pet as JSON."},
                                         {"role": "assistant", "content": '{"kind": "bird", '}])
    check_pet('{"kind": "bird", ' + r.content[0].text)
    import anthropic

    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=20, extra_body=body,
                               messages=[{"role": "user", "content": "Describe a pet."},
                                         {"role": "assistant", "content": "Sure! {"}])
    assert "does not begin a JSON value that 'output_config.format' allows" in e.value.message


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}


SHORT = {"type": "function", "function": {      # a random model ends a string only when it must
    "name": "get_weather", "parameters": {"type": "object", "required": ["city"],
                                          "properties": {"city": {"type": "string", "maxLength": 12}}}}}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_demanded_call_is_a_call_even_from_a_random_model(oai, choice):
    free = ask(oai, temperature=0, max_tokens=60, tools=[SHORT], tool_choice="auto").choices[0]
    assert not free.message.tool_calls          # left alone, the random model calls nothing
    for seed in range(3):
        r = ask(oai, temperature=0.8, seed=seed, max_tokens=300, tools=[SHORT], tool_choice=choice).choices[0]
        assert r.finish_reason == "tool_calls", r.message.content
        (call,) = r.message.tool_calls
        args = json.loads(call.function.arguments)   # one tool offered: its schema, closed
        assert call.function.name == "get_weather" and set(args) == {"city"} and len(args["city"]) <= 12


def test_anthropic_any_tool_is_a_tool_use(claude):
    tool = {"name": "get_weather", "input_schema": SHORT["function"]["parameters"]}
    r = claude.messages.create(model="m", max_tokens=400, tools=[tool], tool_choice={"type": "any"},
                               messages=[{"role": "user", "content": "Weather in Oslo?"}], extra_body={"temperature": 0})
    assert r.stop_reason == "tool_use"
    (use,) = [b for b in r.content if b.type == "tool_use"]
    assert use.name == "get_weather" and set(use.input) == {"city"}


def test_the_default_model_calls_the_tool_it_is_told_to(smol):
    for text, city in [("Is it raining in Paris?", "Paris"), ("What's the weather like in Tokyo today?", "Tokyo")]:
        free = ask(smol, temperature=0, max_tokens=80, tools=[WEATHER], messages=[{"role": "user", "content": text}])
        assert not free.choices[0].message.tool_calls      # this small model answers in words when left free
        r = ask(smol, temperature=0, max_tokens=80, tools=[WEATHER], tool_choice="required",
                messages=[{"role": "user", "content": text}]).choices[0]
        (call,) = r.message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": city}
    r = ask(smol, temperature=0, max_tokens=80, tools=[WEATHER, CLOCK], tool_choice="required",
            messages=[{"role": "user", "content": "What time is it?"}]).choices[0]
    (call,) = r.message.tool_calls
    assert call.function.name in ("get_weather", "get_time") and isinstance(json.loads(call.function.arguments), dict)


def test_held_json_calls_take_the_templates_spacing(smol, default_model_path):
    """SmolLM2's template writes a call back with json.dumps' separators; a held call is written so."""
    from strata.engine import Engine
    from strata.server.call_probe import json_call_frame, json_call_spacing

    engine = Engine(str(default_model_path), n_ctx=64, n_threads=1)
    assert json_call_spacing(engine) == (b", ", b": ")
    assert json_call_frame(engine) == (b"\n", b"\n</tool_call>")     # opened and closed as it writes calls back
    r = ask(smol, temperature=0, max_tokens=80, tools=[WEATHER], tool_choice="required",
            messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments).keys() == {"city"}


def test_the_next_turn_reuses_all_of_a_held_call(smol):
    """The call's fixed text is written in the tokenizer's own split and closed as the template closes it, so
    the next turn's prompt holds the first turn's tokens unchanged (SmolLM2 wrote 'g' 'et' for 'get': 16
    tokens of the call read again)."""
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = ask(smol, temperature=0, max_tokens=80, tools=[WEATHER], tool_choice="required", messages=msgs)
    call = first.choices[0].message
    msgs += [call.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": "Sunny, 21 C"}]
    second = ask(smol, temperature=0, max_tokens=8, tools=[WEATHER], messages=msgs)
    reused = second.usage.prompt_tokens_details.cached_tokens
    assert reused == first.usage.prompt_tokens + first.usage.completion_tokens


def test_a_held_calls_fixed_text_is_read_ahead(smol):
    """The call's markup, the tool's name and the key are taken in the step of the token before them: far
    fewer decode steps than tokens, and the same call."""
    import httpx2 as httpx

    def counters() -> dict:
        text = httpx.get(str(smol.base_url).removesuffix("v1/") + "metrics").text
        return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                if line.startswith(("strata_decode_steps_total", "strata_held_forced_tokens_total"))}

    before = counters()
    r = ask(smol, temperature=0, max_tokens=80, tools=[WEATHER], tool_choice="required",
            messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    after = counters()
    forced = after["strata_held_forced_tokens_total"] - before["strata_held_forced_tokens_total"]
    steps = after["strata_decode_steps_total"] - before["strata_decode_steps_total"]
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert forced >= 15 and steps <= r.usage.completion_tokens - forced, (forced, steps, r.usage.completion_tokens)


def probe_rule(factory, **shape):
    """required_call for a tiny model of this shape (its real template), tool bash and tool read_file."""
    from strata.engine import Engine
    from strata.server.prompting import answer_format
    from strata.server.structured_output import required_call

    engine = Engine(str(factory(ctx_len=2048, n_vocab=512, seed=5, **shape)), n_ctx=64, n_threads=1)
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
             for n in ("bash", "read_file")]
    prompt = engine.tokenize(engine.apply_chat_template([{"role": "user", "content": "hi"}], tools=tools), special=True)
    return required_call(True, tools, answer_format(engine, prompt), engine)


def verdict(root, text: str) -> str:
    from strata.engine.json_grammar import complete, step

    state = ((("V", root),), 0)
    for b in text.encode():
        state = step(state, b)
        if state is None:
            return "refused"
    return "whole" if complete(state) else "prefix"


def test_each_template_opens_its_calls_its_own_way(tiny_model_factory):
    """Each real template's call format is read off its own rendering of a call: key-value markup
    (Qwen3-Coder's XML, GLM's) with its keys and values, Mistral Small 3.2's [ARGS], Nemo's JSON list."""
    from strata.server.structured_output import JsonArgsRule, JsonFormat, KeyedCallRule

    from tests.server.test_glm_live import ADDED as GLM_ADDED
    from tests.server.test_glm_live import TEMPLATES as GLM
    from tests.server.test_mistral_live import ADDED as MISTRAL_ADDED
    from tests.server.test_mistral_live import NEMO, SMALL32
    from tests.text.test_xml_tool_template import XML_TEMPLATE

    qwen_coder = probe_rule(tiny_model_factory, chat_template=XML_TEMPLATE, added_tokens=("<tool_call>", "</tool_call>"))
    assert isinstance(qwen_coder, KeyedCallRule) and qwen_coder.marker == b"<tool_call>" and not qwen_coder.repeat
    m = qwen_coder.markup
    assert (m.opening, m.first, m.mid, m.value_end, m.next_key, m.end) == (
        b"\n<function=", b">\n<parameter=", b">\n", b"\n</parameter>\n<", b"parameter=", b"/function>\n</tool_call>")
    assert [t[0] for t in qwen_coder.tools] == ["bash", "read_file"]
    glm = probe_rule(tiny_model_factory, chat_template=GLM["GLM-4.7-Flash"], tokenizer_pre="glm4", added_tokens=GLM_ADDED)
    assert isinstance(glm, KeyedCallRule) and (glm.markup.opening, glm.markup.mid) == (b"", b"</arg_key><arg_value>")
    assert glm.after == b"</think>"        # GLM-4.7's prompt opens the reasoning: the call follows it
    small = probe_rule(tiny_model_factory, chat_template=SMALL32, tokenizer_pre="tekken", added_tokens=MISTRAL_ADDED)
    assert isinstance(small, JsonArgsRule) and small.header.end == b"[ARGS]" and small.demanded
    assert [name for name, _ in small.tools] == ["bash", "read_file"]
    nemo = probe_rule(tiny_model_factory, chat_template=NEMO, tokenizer_pre="tekken", added_tokens=MISTRAL_ADDED)
    assert isinstance(nemo, JsonFormat) and nemo.lead == b"[TOOL_CALLS]" and nemo.root.kind == "array"
    assert verdict(nemo.root, '[{"name": "bash", "arguments": {}, "id": "abcDEF123"}]') == "whole"
    assert verdict(nemo.root, '[{"name": "bsh"') == "refused"
    chatml = probe_rule(tiny_model_factory)            # no tools in its template: Strata writes Hermes calls
    assert isinstance(chatml, JsonFormat) and chatml.lead == b"<tool_call>\n"      # as Strata writes them back


BAD_CALL = '{"name": "get_wether", "arguments": {"town": "Oslo", "units": "C"}}'


@pytest.fixture(scope="module")
def sloppy(tiny_model_factory):
    """A tiny model with a Qwen 2.5-style template (its calls: <tool_call> and JSON) that answers "Checking."
    then a call of a tool that does not exist, with arguments the real tool does not take (each piece one
    token)."""
    from tests.server.live import scripted_model
    from tests.text.test_chat_template import QWEN_LIKE

    pieces = ("Checking.", "<tool_call>", BAD_CALL, "</tool_call>")
    model = scripted_model(tiny_model_factory, "".join(pieces), ctx_len=2048, n_vocab=512, seed=9, added_tokens=pieces,
                           chat_template=QWEN_LIKE)
    with LiveServer(model=str(model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_a_call_the_model_opens_is_held_to_the_tools(sloppy):
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    free = ask(sloppy, temperature=0, max_tokens=60, messages=messages).choices[0].message   # no tools: as written
    assert BAD_CALL in free.content
    r = ask(sloppy, temperature=0, max_tokens=500, messages=messages, tools=[SHORT, CLOCK]).choices[0]
    assert r.message.content == "Checking." and r.finish_reason == "tool_calls"
    (call,) = r.message.tool_calls
    args = json.loads(call.function.arguments)
    assert call.function.name in ("get_weather", "get_time")
    if call.function.name == "get_weather":
        assert set(args) == {"city"} and len(args["city"]) <= 12
    else:
        assert args == {} or set(args) <= {"zone"}


def test_metrics_count_held_answers(tiny_server, oai):
    import httpx2 as httpx

    def held() -> dict:
        text = httpx.get(tiny_server.url + "/metrics").text
        return {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                if line.startswith("strata_held_")}

    before = held()
    ask(oai, temperature=0, response_format=PET_FORMAT)
    ask(oai, temperature=0.8, seed=1, max_tokens=300, tools=[SHORT], tool_choice="required")
    after = held()
    assert after['strata_held_answers_total{rule="json"}'] == before.get('strata_held_answers_total{rule="json"}', 0) + 1
    assert after['strata_held_answers_total{rule="call"}'] == before.get('strata_held_answers_total{rule="call"}', 0) + 1
    assert after["strata_held_refusals_total"] > before["strata_held_refusals_total"]   # a random model is refused


def xml_coder(factory, call: str):
    """A live server on a tiny model with Qwen3-Coder's XML call template that answers "Editing." then the
    call whose function line and parameter are `call` (each piece one token)."""
    from tests.server.live import scripted_model
    from tests.text.test_xml_tool_template import XML_TEMPLATE

    function, parameter = call.split("|")
    pieces = ("Editing.", "\n<tool_call>\n", function, parameter, "</function>\n</tool_call>")
    model = scripted_model(factory, "".join(pieces), ctx_len=2048, n_vocab=512, seed=4, added_tokens=pieces,
                           chat_template=XML_TEMPLATE)
    return LiveServer(model=str(model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0)


@pytest.fixture(scope="module")
def misspelling_coder(tiny_model_factory):
    """Its call opens a misspelled function."""
    with xml_coder(tiny_model_factory, "<function=edit_fil>\n|<parameter=path>\na.py\n</parameter>\n") as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_an_xml_call_the_model_opens_names_an_offered_tool(misspelling_coder):
    tool = {"type": "function", "function": {"name": "edit_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}}
    free = ask(misspelling_coder, temperature=0, max_tokens=40).choices[0].message.content
    assert "<function=edit_fil>" in free                      # no tools: written as the model wants
    r = ask(misspelling_coder, temperature=0, max_tokens=60, tools=[tool]).choices[0].message
    # the call is held whole, then the answer is free: the script's leftovers may follow as plain text
    assert [c.function.name for c in r.tool_calls or []] == ["edit_file"], r


@pytest.fixture(scope="module")
def inventing_coder(tiny_model_factory):
    """Its call gives a parameter the tool does not have (`pth` for `path`)."""
    with xml_coder(tiny_model_factory, "<function=edit_file>\n|<parameter=pth>\na.py\n</parameter>\n") as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_an_xml_calls_keys_are_the_tools_parameters(inventing_coder):
    tool = {"type": "function", "function": {"name": "edit_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    free = ask(inventing_coder, temperature=0, max_tokens=40).choices[0].message.content
    assert "<parameter=pth>" in free                          # no tools: written as the model wants
    for choice in ("auto", "required"):
        r = ask(inventing_coder, temperature=0, max_tokens=60, tools=[tool], tool_choice=choice).choices[0].message
        # the held call; after it the scripted model's leftovers are free text (a bare `<function=` block
        # without its `<tool_call>` is no call a real model writes, so none is held)
        first = r.tool_calls[0]
        assert first.function.name == "edit_file" and list(json.loads(first.function.arguments)) == ["path"], (choice, r)


def test_a_thinking_model_thinks_then_answers_in_json(tiny_model_factory, scripted_model):
    """A model whose first token opens its reasoning ("<think>Plan it</think>Warm", the prompt not opening
    it) thinks as it wants; the answer after the reasoning is the schema's JSON."""
    from tests.server.conftest import SCRIPT_THOUGHT

    schema = {"type": "object", "additionalProperties": False, "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}
    with LiveServer(model=str(scripted_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        r = ask(client, temperature=0, response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    m = r.choices[0].message
    assert m.model_extra["reasoning_content"] == SCRIPT_THOUGHT
    assert r.choices[0].finish_reason == "stop" and isinstance(json.loads(m.content)["ok"], bool)
