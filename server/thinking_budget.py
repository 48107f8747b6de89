"""How a thinking model's reasoning is cut at a token budget (Anthropic's `thinking.budget_tokens`): which
text opens and closes its reasoning and what is written to end it, per template family.

- `<think>...</think>` (Qwen3, QwQ, DeepSeek-R1 and its distills; Magistral's `[THINK]`, Seed-OSS's
  `<seed:think>`: reasoning.py's tags, AnswerFormat.think): the closing tag is written, after what the
  template writes between an earlier turn's reasoning and that tag (`reasoning_lead`: Qwen3's newline), so
  the next turn renders the tokens the slot holds.
- gpt-oss's Harmony: the reasoning is a first `analysis` message; `<|end|><|start|>assistant<|channel|>`
  is written and the next message may not be `analysis` again (the model goes on with its `final`
  answer or a `commentary` call, as it would after thinking).

`budget_rule(budget, answer)` is the rule for one answer (None without a budget); the scheduler builds its
constraint (strata.engine.reasoning_budget) around the answer's own rule with `constraint_for`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from strata.engine.harmony import CHANNEL, END, MESSAGE, START
from strata.engine.reasoning_budget import ReasoningBudget
from strata.engine.token_bytes import Vocabulary

HARMONY_ANALYSIS_OPENER = (CHANNEL + "analysis" + MESSAGE).encode()
HARMONY_NEXT_MESSAGE = (END + START + "assistant" + CHANNEL).encode()


@dataclass(frozen=True)
class BudgetRule:
    budget: int                 # reasoning tokens before the closing text is written
    opener: bytes               # what the answer begins with when it thinks (unless the prompt opened it)
    closer: bytes               # what ends the reasoning when the model writes it
    forced: bytes               # what is written at the budget
    opened: bool = False        # the prompt ends inside the reasoning
    not_after: bytes = b""      # what the answer may not begin to write right after `forced`

    def constraint_for(self, tokenizer: Any, inner: Any = None) -> ReasoningBudget:
        vocab = Vocabulary.of(tokenizer)
        whole = frozenset(vocab.bytes[i] for i in getattr(tokenizer, "parsed_ids", vocab.special) if 0 <= i < vocab.n)
        return ReasoningBudget(self.budget, vocab, self.opener, self.closer, self.forced, self.opened, inner=inner,
                               not_after=self.not_after, whole=whole)


def budget_rule(budget: int | None, answer: Any, lead: str = "") -> BudgetRule | None:
    """The budget's rule for an answer of this format (prompting.AnswerFormat), None without a budget;
    `lead`: what the template writes between a reasoning and its closing tag (reasoning_lead), written
    before the tag unless the reasoning already ends with it."""
    if budget is None:
        return None
    if getattr(answer, "harmony", False):
        return BudgetRule(budget, HARMONY_ANALYSIS_OPENER, END.encode(), HARMONY_NEXT_MESSAGE,
                          not_after=b"analysis")
    opener, closer = (t.encode() for t in answer.think)
    return BudgetRule(budget, opener, closer, lead.encode() + closer, opened=bool(answer.opened))


PROBE_REASONING, PROBE_CONTENT = "strata-probe-reasoning-7c1", "strata-probe-content-7c1"


@functools.lru_cache(maxsize=16)
def reasoning_lead(template: Any, closer: str) -> str:
    """The whitespace a chat template writes between an earlier turn's reasoning and its closing tag (Qwen3's
    `<think>\nR\n</think>`: a newline), read off a rendered probe; "" when it writes none (GLM's
    `<think>R</think>`), writes no reasoning back, or cannot render the probe. Written before the tag at
    the cut, it makes the answer the slot holds the turn the next request renders."""
    probe = [{"role": "user", "content": "?"},
             {"role": "assistant", "content": PROBE_CONTENT, "reasoning_content": PROBE_REASONING}]
    try:
        text = template.render(probe, add_generation_prompt=False)
    except Exception:       # a template that refuses the probe: the tag alone, as before
        return ""
    at = text.find(PROBE_REASONING)
    end = text.find(closer, at) if at >= 0 else -1
    lead = text[at + len(PROBE_REASONING):end] if end >= 0 else ""
    return lead if lead in ("\n", "\n\n", " ") else ""
