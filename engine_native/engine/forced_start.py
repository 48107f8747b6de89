"""An answer made to begin with one of given byte strings: a tool call when the request demands one
(OpenAI's `tool_choice: "required"` or a named function, Anthropic's `any` / `tool`), whatever the model
would rather write first.

What it is: `ForcedStart(texts, vocabulary, after=None)`, a sampler constraint (sampling.py's protocol, as
json_grammar.JsonConstraint): until one of `texts` has been written whole, a token is allowed only when its
bytes agree with one still possible (a prefix of what is left of it, or all of it and more); then the
answer is free. With `after`, the answer is free until those bytes appear (a thinking model's closing tag)
and the forced start follows.

What it is not: which texts a model's calls open with (the server: structured_output.py), or the rest of
the call (the model writes it; the answer's parser reads it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from strata.engine.json_grammar import Vocabulary


class ForcedStart:
    def __init__(self, texts: Sequence[bytes], vocabulary: Vocabulary, after: bytes | None = None):
        self.left = [t for t in texts if t]     # what is still to write of each possible start
        self.vocab = vocabulary
        self.after = after
        self._seen = b""                        # the answer's bytes while waiting for `after`

    @property
    def active(self) -> bool:
        return self.after is None and bool(self.left) and all(self.left)

    def _agrees(self, data: bytes) -> bool:
        return bool(data) and any(t.startswith(data) or data.startswith(t) for t in self.left)

    def _bytes(self, token: int) -> bytes:
        return self.vocab.bytes[token] if 0 <= token < self.vocab.n else b""

    def allows(self, token: int) -> bool:
        return not self.active or self._agrees(self._bytes(int(token)))

    def advance(self, token: int) -> None:
        data = self._bytes(int(token))
        if self.after is not None:
            self._seen += data
            if self.after in self._seen:
                self.after, self._seen = None, b""
            return
        if self.active:
            self.left = [t[len(data):] if t.startswith(data) else b"" for t in self.left
                         if t.startswith(data) or data.startswith(t)]

    def allowed_mask(self) -> np.ndarray:
        mask = np.zeros(self.vocab.n, dtype=bool)
        if not self.active:
            mask[:] = True
            return mask
        for i in self.vocab.nonempty:
            mask[i] = self._agrees(self.vocab.bytes[i])
        return mask

    def best_allowed(self, logits: np.ndarray) -> int | None:
        """The allowed token of the highest logit (the lowest id on a tie)."""
        mask = self.allowed_mask()
        if not mask.any():
            return None
        return int(np.argmax(np.where(mask, np.asarray(logits, dtype=np.float32), np.float32(-np.inf))))
