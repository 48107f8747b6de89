"""Anthropic's `thinking.budget_tokens` enforced and `display: "omitted"` honoured, through the real anthropic
SDK on a real server: a tiny model whose template opens `<think>` in the generation prompt and whose greedy
answer thinks past the budget (tests/fixtures/tiny_gguf.py `script`: a chain of 1,060 tokens none of which
writes `<`, so it never closes the block itself). With a budget the reasoning holds the budget's tokens,
the same ones the model writes unbudgeted, then `</think>` (an added token, as in Qwen3) is written for it
and the answer goes on as text; streamed and not. Omitted thinking comes back as a block without its text, and
its signature brings the text back to the next turn (a damaged one: no text, never other text)."""

from __future__ import annotations

import anthropic
import httpx2 as httpx
import pytest
from strata.server.thinking_signature import unseal

from tests.server.live import LiveServer
from tests.server.test_reasoning_live import THINKING_TEMPLATE

BUDGET = 1024          # Anthropic's least budget_tokens
ASK = [{"role": "user", "content": "hello"}]
THINK = ("<think>", "</think>")
N_VOCAB = 1240         # about the most the generated vocabulary makes: room for a chain longer than BUDGET


@pytest.fixture(scope="module")
def long_thinker(tiny_model_factory):
    """A model that answers ASK with a chain of plain printable tokens (no `<`), in the opened `<think>`."""
    from strata.engine import Engine

    plain = tiny_model_factory(ctx_len=2048, n_vocab=N_VOCAB, seed=3, chat_template=THINKING_TEMPLATE,
                               added_tokens=THINK)
    engine = Engine(str(plain), n_ctx=256, n_threads=1)
    tok = engine.tokenizer
    last = engine.tokenize(engine.apply_chat_template(ASK, add_generation_prompt=True), special=True)[-1]
    chain = [i for i in range(N_VOCAB) if i != last and i not in tok.special_ids
             and tok.token_bytes(i).isascii() and tok.token_bytes(i).decode().isprintable()
             and b"<" not in tok.token_bytes(i)]
    assert len(chain) > BUDGET + 16
    return tiny_model_factory(ctx_len=2048, n_vocab=N_VOCAB, seed=3, chat_template=THINKING_TEMPLATE,
                              added_tokens=THINK, script=(last, *chain))


@pytest.fixture(scope="module")
def server(long_thinker):
    with LiveServer(model=str(long_thinker), ctx=2048, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield s


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=120)


def budget_cuts(server) -> int:
    """strata_thinking_budget_cuts_total on /metrics."""
    lines = httpx.get(server.url + "/metrics").text.splitlines()
    return int(float(next(ln.split()[1] for ln in lines if ln.startswith("strata_thinking_budget_cuts_total "))))


def ask(claude, max_tokens, **kw):
    return claude.messages.create(model="m", max_tokens=max_tokens, messages=ASK, extra_body={"temperature": 0},
                                  **kw)


def streamed(claude, max_tokens, **kw):
    with claude.messages.stream(model="m", max_tokens=max_tokens, messages=ASK, extra_body={"temperature": 0},
                                **kw) as s:
        events = list(s)
        return events, s.get_final_message()


@pytest.fixture(scope="module")
def unbudgeted(claude):
    """The model's own first BUDGET tokens: all reasoning (it never closes the block), cut by max_tokens."""
    m = ask(claude, BUDGET)
    assert [(b.type, getattr(b, "text", None)) for b in m.content] == [("thinking", None), ("text", "")]
    assert m.stop_reason == "max_tokens"
    return m.content[0].thinking


def test_the_reasoning_is_cut_at_the_budget_and_the_answer_goes_on(server, claude, unbudgeted):
    thinking = {"type": "enabled", "budget_tokens": BUDGET}
    cuts = budget_cuts(server)
    m = ask(claude, BUDGET + 64, thinking=thinking)
    assert [b.type for b in m.content] == ["thinking", "text"] and m.content[1].text, m.content
    assert m.content[0].thinking == unbudgeted            # the budget's tokens, as the model wrote them
    assert m.usage.output_tokens > BUDGET                 # </think>, then the answer's own tokens
    events, final = streamed(claude, BUDGET + 64, thinking=thinking)
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert "".join(e.delta.thinking for e in events if e.type == "content_block_delta"
                   and e.delta.type == "thinking_delta") == unbudgeted
    assert (final.content[0].thinking, final.content[1].text) == (m.content[0].thinking, m.content[1].text)
    assert budget_cuts(server) == cuts + 2


def test_a_budget_max_tokens_cuts_first_changes_nothing(server, claude, unbudgeted):
    """budget_tokens >= max_tokens (Anthropic allows it with interleaved thinking): max_tokens ends the
    answer while it thinks, as without a budget."""
    cuts = budget_cuts(server)
    m = ask(claude, BUDGET, thinking={"type": "enabled", "budget_tokens": BUDGET + 1})
    assert budget_cuts(server) == cuts
    assert m.content[0].thinking == unbudgeted and m.content[1].text == "" and m.stop_reason == "max_tokens"


def test_adaptive_thinking_has_no_budget(claude):
    """Claude Code sends adaptive with budget_tokens 0: the model decides, nothing is cut."""
    m = ask(claude, BUDGET + 16, thinking={"type": "adaptive", "budget_tokens": 0})
    assert m.content[1].text == "" and m.stop_reason == "max_tokens"


def test_omitted_thinking_comes_back_as_a_block_without_its_text(claude):
    """The block is there, its text empty; its signature holds the text for the next turn (sealed, as
    Anthropic's signature carries omitted thinking), streamed (a signature_delta) and not."""
    shown = ask(claude, 40, thinking={"type": "enabled", "budget_tokens": BUDGET})
    assert shown.content[0].thinking and shown.content[0].signature == ""
    m = ask(claude, 40, thinking={"type": "enabled", "budget_tokens": BUDGET, "display": "omitted"})
    assert [(b.type, getattr(b, "thinking", None)) for b in m.content] == [("thinking", ""), ("text", None)]
    assert unseal(m.content[0].signature) == shown.content[0].thinking
    assert m.usage.output_tokens == shown.usage.output_tokens == 40     # the thinking was still written
    events, final = streamed(claude, 40, thinking={"type": "adaptive", "display": "omitted"})
    assert [(b.type, getattr(b, "thinking", None)) for b in final.content] == [("thinking", ""), ("text", None)]
    assert [e.delta.type for e in events if e.type == "content_block_delta"] == ["signature_delta"]
    assert final.content[0].signature == m.content[0].signature
    assert [e.content_block.type for e in events if e.type == "content_block_start"] == ["thinking", "text"]


def test_omitted_thinking_sent_back_reaches_the_template_as_it_was_written(claude):
    """The next turn's prompt is the one the shown thinking makes (the template writes reasoning back), so
    the history the slot holds is reused; a signature Strata did not write is no reasoning."""
    shown = ask(claude, 40, thinking={"type": "enabled", "budget_tokens": BUDGET})
    omitted = ask(claude, 40, thinking={"type": "enabled", "budget_tokens": BUDGET, "display": "omitted"})

    def tokens(block):
        turn = [ASK[0], {"role": "assistant", "content": [block, {"type": "text", "text": "ok"}]},
                {"role": "user", "content": "and?"}]
        return claude.messages.count_tokens(model="m", messages=turn).input_tokens

    as_shown = tokens(shown.content[0].model_dump())
    assert tokens(omitted.content[0].model_dump()) == as_shown
    none = tokens({"type": "thinking", "thinking": "", "signature": ""})
    assert none < as_shown
    sealed = omitted.content[0].signature
    flipped = sealed[:-8] + ("A" if sealed[-8] != "A" else "B") + sealed[-7:]    # one character changed
    for signature in ("EqQBCgIYAhIM", "strata-thinking-v1:é", "strata-thinking-v1:gA",    # foreign, damaged
                      flipped, sealed[:-4], sealed[:-1]):        # damaged on the way: never other reasoning
        assert tokens({"type": "thinking", "thinking": "", "signature": signature}) == none, signature


@pytest.mark.parametrize("thinking, needle", [
    # a budget left out (or null) is named as missing, as the other required fields are, not "got None"
    ({"type": "enabled"}, "'thinking.budget_tokens' is required with type 'enabled'"),
    ({"type": "enabled", "budget_tokens": None}, "'thinking.budget_tokens' is required with type 'enabled'"),
    ({"type": "enabled", "budget_tokens": 1023}, "'thinking.budget_tokens' must be at least 1024"),
    ({"type": "enabled", "budget_tokens": True}, "'thinking.budget_tokens' must be an integer, got true"),
    ({"type": "enabled", "budget_tokens": "2048"}, "'thinking.budget_tokens' must be an integer, got \"2048\""),
])
def test_a_budget_anthropic_refuses_is_a_400(claude, thinking, needle):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=8, messages=ASK, extra_body={"thinking": thinking})
    assert needle in str(e.value)
    assert "None" not in str(e.value) and "True" not in str(e.value)      # JSON's words, never Python's
