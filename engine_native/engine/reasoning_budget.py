"""A thinking model's reasoning held to a token budget (Anthropic's `thinking.budget_tokens`): once the
answer has spent `budget` tokens inside its reasoning and is still thinking, it writes the reasoning's
closing text (`</think>`; Harmony's `<|end|><|start|>assistant<|channel|>`) as if the model had, and
decoding goes on with the answer.

What it is: `ReasoningBudget(budget, vocabulary, opener, closer, forced, opened, inner, not_after)`, a
sampler constraint (sampling.py's protocol, as json_constraint.JsonConstraint) around the answer's own rule
(`inner`: a JSON answer, a held call; None: a free answer), which sees every token as before. The answer
thinks when the prompt opened the reasoning (`opened`) or the answer begins with `opener` (whitespace
before it aside); the reasoning ends where `closer` is written. At the budget the forced text is what
`forced_bytes` names (canonical_split.CanonicalSplit writes it in the tokenizer's own split) and only tokens
that agree with it are allowed; a closing text the answer already began is finished, not repeated (unless
the tokenizer parses it whole: then plain tokens never began it, `</` is code), and a character the budget ends
inside of (a token of its first bytes) is finished first. After
the forced text, the next token may not begin `not_after` (Harmony: no second `analysis` message).

Not here: which markers a model's template uses (server/thinking_budget.py), the sampler.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from strata.engine.token_bytes import Vocabulary, best_in_mask

START, THINKING, FORCING, AFTER_FORCED, FREE = "start", "thinking", "forcing", "after_forced", "free"


def _agrees(data: bytes, text: bytes) -> bool:
    """Whether a token's bytes can be written where `text` must be: a start of it, or all of it and more."""
    return bool(data) and (text.startswith(data) or data.startswith(text))


def _inside_character(data: bytes) -> bool:
    """Whether `data` ends inside a UTF-8 character: its first byte written, not all the bytes after it."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 != 0x80:            # not a continuation byte: the character's first
            need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
            return need > back
    return False


def _begun(seen: bytes, text: bytes, limit: int) -> int:
    """How many bytes of `text` the end of `seen` already wrote (the longest end of it that starts `text`), at
    most `limit`."""
    for k in range(min(len(seen), len(text) - 1, limit), 0, -1):
        if text.startswith(seen[-k:]):
            return k
    return 0


class ReasoningBudget:
    def __init__(self, budget: int, vocabulary: Vocabulary, opener: bytes, closer: bytes, forced: bytes,
                 opened: bool, inner: Any = None, not_after: bytes = b"", whole: frozenset[bytes] = frozenset()):
        self.budget, self.vocab, self.inner = budget, vocabulary, inner
        self.opener, self.closer, self.forced, self.not_after = opener, closer, forced, not_after
        self.mode = THINKING if opened else START
        self.spent = 0                  # the answer's tokens so far, while it may think
        self._seen = b""                # the reasoning's last bytes (the answer's start, before it thinks)
        self._left = b""                # what is still to force
        self.cut = False                # the budget ended the reasoning (the server's /metrics)
        # the reasoning's plain tokens may have begun the forced text only up to its first token parsed whole
        # (`whole`: the texts of GLM's or Qwen3's added `</think>`, Harmony's `<|end|>`): a plain `</` is
        # code (`</div>`), and finished into `</think>` it would lose its bytes and not be the token
        self._may_begin = min([forced.find(w) for w in whole if w and w in forced] + [len(forced)])

    def _bytes(self, token: int) -> bytes:
        return self.vocab.bytes[token] if 0 <= token < self.vocab.n else b""

    def _inner_allows(self, token: int) -> bool:
        return self.inner is None or self.inner.allows(token)

    def allows(self, token: int) -> bool:
        token = int(token)
        if self.mode == FORCING:
            return _agrees(self._bytes(token), self._left) and self._inner_allows(token)
        if self.mode == AFTER_FORCED and self.not_after and _agrees(self._bytes(token), self.not_after):
            return False
        return self._inner_allows(token)

    def advance(self, token: int) -> None:
        token = int(token)
        data = self._bytes(token)
        if self.inner is not None:
            self.inner.advance(token)
        if self.mode == FORCING:
            if self._left.startswith(data):
                self._left = self._left[len(data):]
                if not self._left:
                    self.mode = AFTER_FORCED
                return
            self._left, self.mode = b"", FREE   # the forced text and more, in one token
            return
        if self.mode == AFTER_FORCED:
            self.mode = FREE
            return
        if self.mode == FREE:
            return
        self.spent += 1
        self._seen += data
        if self.mode == START:
            head = self._seen.lstrip()
            if head.startswith(self.opener):
                self.mode, self._seen = THINKING, head[len(self.opener):]
            elif not self.opener.startswith(head):
                self.mode = FREE                # the answer does not think
                return
        if self.mode == THINKING:
            if self.closer in self._seen:
                self.mode = FREE
            # a character the reasoning is writing is finished first (a broken one would come back as
            # U+FFFD); bytes that never make one hold the cut off for 3 tokens at most
            elif self.spent >= self.budget and (self.spent >= self.budget + 3 or not _inside_character(self._seen)):
                self.mode, self._left, self.cut = FORCING, self.forced[_begun(self._seen, self.forced, self._may_begin):], True
            else:
                self._seen = self._seen[-len(self.closer):]

    def forced_bytes(self, after: bytes = b"") -> bytes:
        """The closing text still to write (after `after`), or the inner rule's forced bytes."""
        if self.mode == FORCING:
            return self._left[len(after):] if self._left.startswith(after) else b""
        forced = getattr(self.inner, "forced_bytes", None)
        return forced(after) if forced is not None else b""

    def allowed_mask(self) -> np.ndarray:
        inner = self.inner.allowed_mask() if self.inner is not None else np.ones(self.vocab.n, dtype=bool)
        if self.mode == FORCING or (self.mode == AFTER_FORCED and self.not_after):
            text = self._left if self.mode == FORCING else self.not_after
            agree = np.zeros(self.vocab.n, dtype=bool)
            # only tokens that begin with the text's first byte can agree with it (special ones included)
            for ids in (self.vocab.by_first.get(text[0], ()), self.vocab.special_nonempty):
                for i in ids:
                    agree[i] = _agrees(self.vocab.bytes[i], text)
            return inner & (agree if self.mode == FORCING else ~agree)
        return inner

    def best_allowed(self, logits: np.ndarray) -> int | None:
        """The allowed token of the highest logit (the lowest id on a tie)."""
        if self.mode not in (FORCING, AFTER_FORCED) and self.inner is not None:
            return self.inner.best_allowed(logits)
        return best_in_mask(self.allowed_mask(), logits)
