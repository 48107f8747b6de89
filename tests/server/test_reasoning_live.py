"""A thinking model's reasoning kept apart from its answer on all three chat APIs, through the real SDKs:
a scripted tiny model that answers "<think>Plan it</think>Warm" (tests/fixtures/tiny_gguf.py `script`:
real weights, known output), streamed and not; a tiny model whose template opens `<think>` in the
generation prompt (its whole random answer is reasoning); and reasoning sent back in a conversation's
history reaching a template that writes it."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.fixtures.bpe_vocab import CHATML_TEMPLATE
from tests.server.conftest import SCRIPT_ANSWER as ANSWER
from tests.server.conftest import SCRIPT_THOUGHT as THOUGHT
from tests.server.live import LiveServer

THINKING_TEMPLATE = (   # as Qwen3's: earlier reasoning written back, the generation prompt opens <think>
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message.reasoning_content %}{{ '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}"
    "{% endif %}{{ message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}"
)


def clients(server) -> tuple[openai.OpenAI, anthropic.Anthropic]:
    return (openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120),
            anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=120))


@pytest.fixture(scope="module")
def scripted(scripted_model):
    with LiveServer(model=str(scripted_model), ctx=2048, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield clients(s)


def test_openai_chat_gives_reasoning_content(scripted):
    oai, _ = scripted
    msgs = [{"role": "user", "content": "weather?"}]
    r = oai.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=30)
    message = r.choices[0].message
    assert (message.reasoning_content, message.content) == (THOUGHT, ANSWER)
    assert r.choices[0].finish_reason == "stop"
    chunks = list(oai.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=30, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == THOUGHT
    assert "".join(d.content or "" for d in deltas) == ANSWER
    first = next(i for i, d in enumerate(deltas) if d.content)
    assert all(not getattr(d, "reasoning_content", None) for d in deltas[first:])   # thinking comes first
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with_tools = oai.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=30, tools=tools)
    assert (with_tools.choices[0].message.reasoning_content, with_tools.choices[0].message.content) == (THOUGHT, ANSWER)


def test_anthropic_gives_a_thinking_block_first(scripted):
    _, claude = scripted
    msgs = [{"role": "user", "content": "weather?"}]
    m = claude.messages.create(model="m", max_tokens=30, messages=msgs, extra_body={"temperature": 0})
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert (m.content[0].thinking, m.content[1].text) == (THOUGHT, ANSWER) and m.stop_reason == "end_turn"
    with claude.messages.stream(model="m", max_tokens=30, messages=msgs, extra_body={"temperature": 0}) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()      # the SDK's accumulator checks the block sequence
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content] == [
        ("thinking", THOUGHT), ("text", ANSWER)]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 2


def test_responses_gives_a_reasoning_item_first(scripted):
    oai, _ = scripted
    r = oai.responses.create(model="m", input="weather?", temperature=0, max_output_tokens=30)
    assert [o.type for o in r.output] == ["reasoning", "message"] and r.status == "completed"
    assert r.output[0].content[0].text == THOUGHT and r.output_text == ANSWER
    with oai.responses.stream(model="m", input="weather?", temperature=0, max_output_tokens=30) as s:
        events = list(s)
        final = s.get_final_response()
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == THOUGHT
    assert [o.type for o in final.output] == ["reasoning", "message"] and final.output_text == ANSWER
    assert {e.output_index for e in events if e.type == "response.output_text.delta"} == {1}


@pytest.fixture(scope="module")
def thinker(tiny_model_factory):
    model = tiny_model_factory(ctx_len=2048, n_vocab=512, seed=3, chat_template=THINKING_TEMPLATE)
    with LiveServer(model=str(model), ctx=2048, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield clients(s)


def test_a_prompt_that_opens_thinking_makes_the_answer_reasoning(thinker):
    """The template opened <think>: the tiny model's random answer never closes it, so all of it is
    reasoning and the content is empty, the same streamed and not, on every API."""
    oai, claude = thinker
    msgs = [{"role": "user", "content": "hello"}]
    r = oai.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=20)
    reasoning = r.choices[0].message.reasoning_content
    assert reasoning and r.choices[0].message.content == ""
    chunks = list(oai.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=20, stream=True))
    assert "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices) \
        == reasoning
    m = claude.messages.create(model="m", max_tokens=20, messages=msgs, extra_body={"temperature": 0})
    assert m.content[0].type == "thinking" and m.content[0].thinking == reasoning
    resp = oai.responses.create(model="m", input="hello", temperature=0, max_output_tokens=20)
    assert resp.output[0].type == "reasoning" and resp.output[0].content[0].text == reasoning


def test_reasoning_in_the_history_reaches_the_template(thinker):
    """OpenAI's reasoning_content, Anthropic's thinking block and a Responses reasoning item on an earlier
    assistant turn are written back by a template that writes reasoning: the prompt grows by it."""
    oai, claude = thinker
    turn = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "again"}]
    said = [dict(turn[0]), {**turn[1], "reasoning_content": "a greeting back"}, dict(turn[2])]

    def prompt_tokens(messages):
        return oai.chat.completions.create(model="m", messages=messages, max_tokens=1).usage.prompt_tokens

    assert prompt_tokens(said) > prompt_tokens(turn)
    blocks = [{"type": "thinking", "thinking": "a greeting back", "signature": ""}, {"type": "text", "text": "hello"}]
    with_thinking = [turn[0], {"role": "assistant", "content": blocks}, turn[2]]
    assert (claude.messages.count_tokens(model="m", messages=with_thinking).input_tokens
            == claude.messages.count_tokens(model="m", messages=turn).input_tokens + prompt_tokens(said)
            - prompt_tokens(turn))
    items = [turn[0], {"type": "reasoning", "id": "rs_1", "summary": [],
                       "content": [{"type": "reasoning_text", "text": "a greeting back"}]}, turn[1], turn[2]]
    r = oai.responses.create(model="m", input=items, max_output_tokens=1)
    assert r.usage.input_tokens == prompt_tokens(said)


def test_the_tiny_chatml_template_still_answers_without_reasoning(tiny_server):
    """A model whose template does not open <think> and whose answer does not start with it: no
    reasoning fields at all."""
    oai, claude = clients(tiny_server)
    r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                    temperature=0)
    assert getattr(r.choices[0].message, "reasoning_content", None) is None
    assert "<think>" not in CHATML_TEMPLATE


# ----- the tokens spent reasoning: chat's completion_tokens_details, Responses' output_tokens_details -----

def reasoning_counts(oai, **kw) -> list[tuple[int, int]]:
    """(reasoning tokens, all output tokens) of one question on chat completions and the Responses API,
    each whole and streamed."""
    msgs = [{"role": "user", "content": "weather?"}]
    chat = dict(model="m", messages=msgs, temperature=0, **kw)
    out = []
    for r in (oai.chat.completions.create(**chat),
              list(oai.chat.completions.create(**chat, stream=True, stream_options={"include_usage": True}))[-1]):
        out.append((r.usage.completion_tokens_details.reasoning_tokens, r.usage.completion_tokens))
    kw = {"max_output_tokens": kw["max_tokens"]}
    for r in (oai.responses.create(model="m", input="weather?", temperature=0, **kw),
              list(oai.responses.create(model="m", input="weather?", temperature=0, stream=True, **kw))[-1].response):
        out.append((r.usage.output_tokens_details.reasoning_tokens, r.usage.output_tokens))
    return out


def test_the_reasoning_tokens_are_counted(scripted, scripted_model):
    from strata.engine import Engine

    thought = len(Engine(str(scripted_model), n_ctx=64, n_threads=1).tokenize(f"<think>{THOUGHT}</think>",
                                                                            special=True))
    counts = reasoning_counts(scripted[0], max_tokens=30)
    assert counts == [(thought, counts[0][1])] * 4 and counts[0][1] > thought    # "Warm" is not reasoning


def test_an_answer_cut_while_thinking_is_all_reasoning_tokens(thinker):
    assert reasoning_counts(thinker[0], max_tokens=12) == [(12, 12)] * 4


def test_an_answer_without_reasoning_counts_none(oai):
    counts = reasoning_counts(oai, max_tokens=6)
    assert [r for r, _ in counts] == [0] * 4 and all(n > 0 for _, n in counts)


# ----- Anthropic's `thinking` switch reaches a template that has one -----

SWITCH_TEMPLATE = THINKING_TEMPLATE.replace(   # as Qwen3's: enable_thinking false closes an empty block at once
    "{{ '<|im_start|>assistant\\n<think>\\n' }}",
    "{{ '<|im_start|>assistant\\n<think>\\n' }}{% if enable_thinking is defined and not enable_thinking %}"
    "{{ '\\n</think>\\n\\n' }}{% endif %}")


@pytest.fixture(scope="module")
def switchable(tiny_model_factory):
    model = tiny_model_factory(ctx_len=2048, n_vocab=512, seed=3, chat_template=SWITCH_TEMPLATE)
    with LiveServer(model=str(model), ctx=2048, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield clients(s)[1]


def test_anthropic_thinking_disabled_turns_the_templates_thinking_off(switchable):
    msgs = [{"role": "user", "content": "hello"}]

    def ask(**kw):
        return switchable.messages.create(model="m", max_tokens=8, messages=msgs, extra_body={"temperature": 0}, **kw)

    for on in (ask(), ask(thinking={"type": "enabled", "budget_tokens": 1024})):
        assert on.content[0].type == "thinking"       # the template opened <think>: the answer starts in it
    off = ask(thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"] and off.content[0].text
    counted = switchable.messages.count_tokens(model="m", messages=msgs, thinking={"type": "disabled"})
    assert counted.input_tokens == off.usage.input_tokens + off.usage.cache_read_input_tokens
    assert counted.input_tokens > switchable.messages.count_tokens(model="m", messages=msgs).input_tokens


def sdk_thinking_types() -> list[str]:
    """Every `thinking.type` the installed anthropic SDK can send (its ThinkingConfigParam union)."""
    import typing

    from anthropic.types import ThinkingConfigParam

    return [typing.get_args(typing.get_args(typing.get_type_hints(c, include_extras=True)["type"])[0])[0]
            for c in typing.get_args(ThinkingConfigParam)]


def test_every_thinking_type_the_sdk_sends_is_answered(switchable):
    """A type the SDK offers is no 400 (the SDK's 'between_tools' was one); only 'disabled' turns thinking
    off. Claude Code 2.1.252+ sends adaptive with budget_tokens 0 and may ask for the thinking's display."""
    types = sdk_thinking_types()
    assert {"enabled", "disabled", "adaptive", "between_tools"} <= set(types)
    msgs = [{"role": "user", "content": "hello"}]
    for kind in types:
        extra = {"budget_tokens": 1024, "display": "summarized"} if kind == "enabled" else {}
        answer = switchable.messages.create(model="m", max_tokens=8, messages=msgs, extra_body={"temperature": 0},
                                            thinking={"type": kind, **extra})
        assert (answer.content[0].type == "thinking") == (kind != "disabled"), kind
    adaptive = switchable.messages.create(model="m", max_tokens=8, messages=msgs, extra_body={
        "temperature": 0, "thinking": {"type": "adaptive", "budget_tokens": 0, "display": "omitted"}})
    assert adaptive.content[0].type == "thinking"


BAD_TYPE = "'thinking' must be an object whose 'type' is 'enabled', 'disabled', 'adaptive' or 'between_tools'"


@pytest.mark.parametrize("thinking, needle", [
    ("off", BAD_TYPE),
    ({"type": "sometimes"}, BAD_TYPE),
    ({"type": "enabled", "budget_tokens": "lots"}, "'thinking.budget_tokens' must be an integer"),
])
def test_a_bad_thinking_is_a_400(switchable, thinking, needle):
    with pytest.raises(anthropic.BadRequestError) as e:
        switchable.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}],
                                   extra_body={"thinking": thinking})
    assert needle in str(e.value)
