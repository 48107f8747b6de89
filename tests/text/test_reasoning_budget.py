"""A thinking model's reasoning cut at a token budget (strata.engine.reasoning_budget, the rules of
server/thinking_budget.py): over a small vocabulary of pieces, when the closing text is written and what may
come after it; then through the real sampler and CanonicalSplit on generated vocabularies (a Qwen3-like one
whose `</think>` is an added token, gpt-oss's Harmony markup), with a model that would rather write short
tokens: the closing text comes in the tokenizer's own split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from strata.engine.canonical_split import CanonicalSplit
from strata.engine.json_constraint import JsonConstraint
from strata.engine.json_schema import ANY_OBJECT
from strata.engine.sampling import Sampler, SamplingParams
from strata.engine.token_bytes import Vocabulary
from strata.engine.tokenizer import TOKEN_CONTROL, TOKEN_USER_DEFINED, Tokenizer
from strata.server.prompting import AnswerFormat
from strata.server.thinking_budget import budget_rule

from tests.fixtures.bpe_vocab import build_vocab

FIXTURES = Path(__file__).parents[1] / "fixtures"

PIECES = [b"<think>", b"</think>", b"</", b"think>", b"a", b" b", b"\n", b"{", b"}", b"Hi", b"<", b"/"]
VOCAB = Vocabulary(PIECES + [b""], special_ids=[len(PIECES)])
EOS = len(PIECES)
OPENED = AnswerFormat(opened=True)
NOT_OPENED = AnswerFormat()


def tok(piece: bytes) -> int:
    return PIECES.index(piece)


def budget(n: int, answer: AnswerFormat = OPENED, inner=None):
    class Tok:              # what BudgetRule reads of a tokenizer: Vocabulary.of's cache
        _json_vocabulary = VOCAB
    return budget_rule(n, answer).constraint_for(Tok(), inner)


def write(c, pieces: list[bytes]) -> None:
    for p in pieces:
        assert c.allows(tok(p)), p
        c.advance(tok(p))


def allowed(c) -> set[bytes]:
    return {PIECES[i] for i in range(len(PIECES)) if c.allows(i)}


def test_no_budget_no_rule():
    assert budget_rule(None, OPENED) is None


def test_at_the_budget_only_the_closing_tag_may_come():
    c = budget(3)
    write(c, [b"a", b" b"])
    assert c.forced_bytes() == b"" and c.allows(EOS)
    write(c, [b"a"])                                   # the third reasoning token: the budget is spent
    assert c.forced_bytes() == b"</think>" and allowed(c) == {b"</think>", b"</", b"<"} and not c.allows(EOS)
    assert {PIECES[i] for i in np.flatnonzero(c.allowed_mask())} == allowed(c)
    logits = np.zeros(VOCAB.n, dtype=np.float32)
    logits[tok(b"<")] = 1.0
    assert c.best_allowed(logits) == tok(b"<")
    write(c, [b"</"])
    assert c.forced_bytes() == b"think>" and allowed(c) == {b"think>"}
    write(c, [b"think>", b"Hi", b"a"])                  # then the answer is free
    assert c.allows(EOS) and len(allowed(c)) == len(PIECES)



def test_the_cut_waits_for_the_end_of_a_character():
    """A budget spent inside a character (a token of the first bytes of 中, E4 B8 AD, as byte-level BPE
    vocabularies split rare characters) ends the character first, up to its last byte, so the reasoning
    holds no broken character (it would come back as U+FFFD and not match the tokens the slot holds)."""
    pieces = [b"</think>", b"a", b"\xe4", b"\xe4\xb8", b"\xb8", b"\xad", b"\xf0\x9f", b"\x98\x80"]
    vocab = Vocabulary(pieces + [b""], special_ids=[len(pieces)])

    class Tok:
        _json_vocabulary = vocab

    for reasoning, forced_after in (([b"a", b"\xe4"], [b"\xb8", b"\xad"]),        # 2 of 3 bytes to come
                                    ([b"a", b"\xe4\xb8"], [b"\xad"]),
                                    ([b"\xe4\xb8", b"\xad"], []),                  # whole: cut at once
                                    ([b"a", b"\xf0\x9f"], [b"\x98\x80"])):        # 😀 in two tokens
        c = budget_rule(2, OPENED).constraint_for(Tok())
        for p in reasoning + forced_after:
            assert c.forced_bytes() == b"" and c.allows(pieces.index(p)), (reasoning, p)
            c.advance(pieces.index(p))
        assert c.forced_bytes() == b"</think>" and c.cut, reasoning
    # bytes that never make a character do not hold the cut off for long: 4 tokens at most
    c = budget_rule(2, OPENED).constraint_for(Tok())
    for p in [b"a", b"\xe4", b"\xe4", b"\xe4", b"\xe4", b"\xe4"]:
        if c.forced_bytes():
            break
        c.advance(pieces.index(p))
    assert c.forced_bytes() == b"</think>" and c.spent <= 2 + 4

def test_a_closing_tag_the_reasoning_began_is_finished_not_repeated():
    c = budget(3)
    write(c, [b"a", b" b", b"</"])
    assert c.forced_bytes() == b"think>"


def test_reasoning_closed_within_the_budget_is_left_alone():
    c = budget(4)
    write(c, [b"a", b"</think>", b"a", b"a", b"a"])
    assert c.forced_bytes() == b"" and c.allows(EOS)


def test_an_answer_that_opens_its_own_reasoning_counts_from_its_start():
    c = budget(3, NOT_OPENED)
    write(c, [b"\n", b"<think>"])
    write(c, [b"a"])
    assert c.forced_bytes() == b"</think>"
    c = budget(3, NOT_OPENED)                          # an answer that does not think is never cut
    write(c, [b"Hi", b"a", b"a", b"a", b"a"])
    assert c.forced_bytes() == b"" and c.allows(EOS)


def test_the_answers_own_rule_sees_the_closing_tag_and_holds_what_follows():
    """A JSON answer after the reasoning (structured_output: `after` the closing tag): the budget writes the
    tag, then the JSON rule holds the answer."""
    inner = JsonConstraint(ANY_OBJECT, VOCAB, [EOS], after=b"</think>")
    c = budget(2, inner=inner)
    write(c, [b"a", b"a", b"</think>"])
    assert allowed(c) == {b"{", b"\n"}
    write(c, [b"{", b"}"])
    assert c.allows(EOS)


# ----- through the sampler and CanonicalSplit, on generated vocabularies -----

def tokenizer(extra: tuple[str, ...], extra_type: int, **keys) -> Tokenizer:
    v = build_vocab(512)
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-4o",
          "tokenizer.ggml.tokens": list(v.tokens) + list(extra),
          "tokenizer.ggml.token_type": list(v.token_types) + [extra_type] * len(extra),
          "tokenizer.ggml.merges": list(v.merges)}
    md.update({f"tokenizer.ggml.{k}": val for k, val in keys.items()})
    return Tokenizer.from_metadata(md)


def short_first(tok: Tokenizer) -> np.ndarray:
    """A model that likes short tokens best (and single letters most): held to a text, it writes it a byte
    at a time."""
    return -np.array([len(tok.token_bytes(i)) or 99 for i in range(tok.n_vocab)], dtype=np.float32)


def run(tok: Tokenizer, rule, steps: int) -> list[int]:
    sampler = Sampler(SamplingParams(), tok.n_vocab, constraint=CanonicalSplit(rule.constraint_for(tok), tok))
    logits = short_first(tok)
    return [sampler.sample(logits) for _ in range(steps)]


def test_the_closing_tag_is_the_added_token_as_the_next_turn_reads_it():
    """Qwen3's `</think>` is an added (user-defined) token: written byte by byte, a model would not read
    its reasoning as closed, and the next turn would read the answer again from there."""
    tok = tokenizer(("<think>", "</think>"), TOKEN_USER_DEFINED)
    close = tok.token_id("</think>")
    ids = run(tok, budget_rule(5, OPENED), 8)
    assert ids[5] == close and close not in ids[:5] and close not in ids[6:]
    assert tok.decode(ids[:6]).endswith("</think>") and len(ids[:5]) == 5


@pytest.fixture(scope="module")
def harmony() -> Tokenizer:
    specials = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>")
    n = len(build_vocab(512).tokens)
    return tokenizer(specials, TOKEN_CONTROL, eos_token_id=n + specials.index("<|return|>"))


def test_a_harmony_analysis_is_ended_and_the_next_message_is_not_analysis(harmony):
    tok = harmony
    header = tok.encode("<|channel|>analysis<|message|>", add_bos=False)
    c = CanonicalSplit(budget_rule(len(header) + 3, AnswerFormat(harmony=True)).constraint_for(tok), tok)
    for t in header:
        c.advance(t)
    sampler = Sampler(SamplingParams(), tok.n_vocab, constraint=c)
    logits = short_first(tok)
    thought = [sampler.sample(logits) for _ in range(3)]
    assert c.forced_bytes() == b"<|end|><|start|>assistant<|channel|>" and not c.allows(tok.eos_id)
    forced = tok.encode("<|end|><|start|>assistant<|channel|>", add_bos=False)
    assert [sampler.sample(logits) for _ in forced] == forced and tok.token_id("<|end|>") not in thought
    assert not c.allows(tok.token_id("a")) and not c.allows(tok.token_id("an"))     # no second analysis
    assert c.allows(tok.encode("final", add_bos=False)[0])
    assert not c.allowed_mask()[tok.token_id("a")] and c.allowed_mask()[tok.encode("final", add_bos=False)[0]]
    assert not tok.decode([sampler.sample(logits)]).startswith("a")
    assert c.allows(tok.token_id("a"))                  # then free


def test_a_harmony_answer_that_does_not_begin_with_analysis_is_never_cut(harmony):
    tok = harmony
    c = budget_rule(2, AnswerFormat(harmony=True)).constraint_for(tok)
    for t in tok.encode("<|channel|>final<|message|>Hello there", add_bos=False):
        c.advance(t)
    assert c.forced_bytes() == b""


GLM_LIKE = ("{% for m in messages %}<|{{ m.role }}|>{% if m.reasoning_content %}<think>{{ m.reasoning_content }}"
            "</think>{% endif %}{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|assistant|><think>{% endif %}")
NO_WRITE_BACK = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}")


def test_the_cut_writes_what_the_template_writes_before_the_closing_tag():
    """Qwen3's template writes an earlier turn's reasoning back as `<think>\\nR\\n</think>\\n\\n` (R stripped):
    the cut writes `\\n</think>` (`</think>` alone after a reasoning that ends in a newline), so the turn the
    slot holds is the one the next request renders, not a prompt that leaves it right where the cut was;
    GLM's writes `<think>R</think>`: `</think>` alone; a template that writes no reasoning back: the tag."""
    from strata.engine.chat_template import ChatTemplate
    from strata.server.prompting import split_answer
    from strata.server.thinking_budget import reasoning_lead

    from tests.server.test_reasoning_live import THINKING_TEMPLATE

    assert [reasoning_lead(ChatTemplate(t), "</think>") for t in (THINKING_TEMPLATE, GLM_LIKE, NO_WRITE_BACK)] == \
        ["\n", "", ""]
    for name, closer in (("GLM-4.6", "</think>"), ("GLM-4.7-Flash", "</think>"), ("ByteDance-Seed-OSS", "</seed:think>")):
        real = ChatTemplate((FIXTURES / f"{name}.jinja").read_text())      # reasoning, then the tag at once
        assert reasoning_lead(real, closer) == "", name
    qwen = ChatTemplate(THINKING_TEMPLATE)
    ask = [{"role": "user", "content": "hello"}]
    prompt = qwen.render(ask, add_generation_prompt=True)
    for reasoning, forced in (([b"a", b" b"], b"\n</think>"), ([b"a", b"\n"], b"</think>"),
                              ([b"a", b"<"], b"\n</think>")):     # a `<` of the reasoning's own stays its text
        c = budget_rule(2, OPENED, lead=reasoning_lead(qwen, "</think>")).constraint_for(type("T", (), {
            "_json_vocabulary": VOCAB})())
        write(c, reasoning)
        assert c.forced_bytes() == forced, reasoning
        answer = (b"".join(reasoning) + forced + b"\n\nHi").decode()
        thought, content, _ = split_answer(answer, OPENED, None)
        turn = qwen.render(ask + [{"role": "assistant", "content": content, "reasoning_content": thought}],
                           add_generation_prompt=False)
        assert turn.startswith(prompt + answer), (turn, prompt + answer)


@pytest.mark.parametrize("lead", ["", "\n"])
def test_plain_tokens_never_begin_a_closing_tag_the_tokenizer_parses_whole(lead):
    """GLM's and Qwen3's `</think>` is an added token: reasoning about HTML that the budget cuts right after a
    plain `<` or `</` keeps those bytes, and the whole tag (the added token) follows, after the template's lead
    (Qwen3's newline, which the reasoning's own newline does begin). Finishing the plain `</` with `think>`
    lost the bytes from the reasoning and wrote a tag the next turn reads back as another token."""
    tok = tokenizer(("<think>", "</think>"), TOKEN_USER_DEFINED)
    close = tok.token_id("</think>")
    for text in ("The tag <", "The tag </", "Close it\n</", "Two lines\n"):
        plain = tok.encode(text, add_bos=False)
        assert close not in plain
        rule = budget_rule(len(plain), OPENED, lead)
        c = rule.constraint_for(tok)
        for t in plain:
            c.advance(t)
        begun = 1 if lead and text.endswith("\n") else 0
        assert c.forced_bytes() == (lead + "</think>").encode()[begun:], text
    # through the sampler and CanonicalSplit: the added token follows the plain `</`
    plain = tok.encode("x </", add_bos=False)
    c = CanonicalSplit(budget_rule(len(plain), OPENED, lead).constraint_for(tok), tok)
    for t in plain:
        c.advance(t)
    sampler = Sampler(SamplingParams(), tok.n_vocab, constraint=c)
    logits = short_first(tok)
    ids = [sampler.sample(logits) for _ in range(len(lead) + 1)]
    assert ids[-1] == close and tok.decode(plain + ids) == "x </" + lead + "</think>"
