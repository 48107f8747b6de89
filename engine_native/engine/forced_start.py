"""An answer made to begin with given bytes: a tool call when the request demands one (OpenAI's
`tool_choice: "required"` or a named function, Anthropic's `any` / `tool`), whatever the model would
rather write first.

What it is: `ForcedStart(text, vocabulary, after=None)`, a sampler constraint (sampling.py's protocol, as
json_grammar.JsonConstraint): while bytes of `text` are left, a token is allowed only when its bytes
agree with them (a prefix of what is left, or what is left and more); then it is free. With `after`, the
answer is free until those bytes appear (a thinking model's closing tag) and the forced start follows.

What it is not: which text a model's calls open with (the server: structured_output.py), or the rest of
the call (the model writes it; the answer's parser reads it).
"""

from __future__ import annotations

import numpy as np
from strata.engine.json_grammar import Vocabulary


class ForcedStart:
    def __init__(self, text: bytes, vocabulary: Vocabulary, after: bytes | None = None):
        self.left = text
        self.vocab = vocabulary
        self.after = after
        self._seen = b""        # the answer's bytes while waiting for `after`

    @property
    def active(self) -> bool:
        return self.after is None and bool(self.left)

    def _agrees(self, token: int) -> bool:
        b = self.vocab.bytes[token] if 0 <= token < self.vocab.n else b""
        return bool(b) and (self.left.startswith(b) or b.startswith(self.left))

    def allows(self, token: int) -> bool:
        return not self.active or self._agrees(int(token))

    def advance(self, token: int) -> None:
        token = int(token)
        data = self.vocab.bytes[token] if 0 <= token < self.vocab.n else b""
        if self.after is not None:
            self._seen += data
            if self.after in self._seen:
                self.after, self._seen = None, b""
            return
        self.left = self.left[len(data):] if self.left.startswith(data) else b""

    def allowed_mask(self) -> np.ndarray:
        mask = np.zeros(self.vocab.n, dtype=bool)
        if not self.active:
            mask[:] = True
            return mask
        for i in self.vocab.nonempty:
            mask[i] = self._agrees(int(i))
        return mask

    def best_allowed(self, logits: np.ndarray) -> int | None:
        """The allowed token of the highest logit (the lowest id on a tie)."""
        mask = self.allowed_mask()
        if not mask.any():
            return None
        masked = np.where(mask, np.asarray(logits, dtype=np.float32), np.float32(-np.inf))
        return int(np.argmax(masked))
