"""An answer made to begin with one of given byte strings: a tool call when the request demands one
(OpenAI's `tool_choice: "required"` or a named function, Anthropic's `any` / `tool`), whatever the model
would rather write first.

What it is: `ForcedStart(texts, vocabulary, after=None)`, a sampler constraint (sampling.py's protocol, as
json_constraint.JsonConstraint): until one of `texts` has been written whole, a token is allowed only when its
bytes agree with one still possible (a prefix of what is left of it, or all of it and more); then the
answer is free. With `after`, the answer is free until those bytes appear (a thinking model's closing tag)
and the forced start follows; with `repeat`, each time they appear (outside a reasoning block: the
opening of each call a model writes itself, held to the offered tools' names).

What it is not: which texts a model's calls open with (the server: structured_output.py), or the rest of
the call (the model writes it; the answer's parser reads it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
from strata.engine.token_bytes import Vocabulary, best_in_mask, may_finish, text_after, unheld_mask


class ForcedStart:
    def __init__(self, texts: Sequence[bytes], vocabulary: Vocabulary, after: bytes | None = None,
                 repeat: bool = False, reasoning: tuple[bytes, bytes] | None = None, opened: bool = False):
        self.texts = [t for t in texts if t]
        self.left = list(self.texts)            # what is still to write of each possible start
        self.vocab = vocabulary
        self.after = after
        # `repeat`: after each start written, free until `after` is written again (outside `reasoning`)
        self.repeat, self._trigger, self.reasoning = repeat, after, reasoning
        # the answer's bytes while waiting for `after` (the prompt may have opened the reasoning)
        self._seen = reasoning[0] if opened and reasoning is not None else b""

    @property
    def active(self) -> bool:
        return self.after is None and bool(self.left) and all(self.left)

    def _agrees(self, data: bytes) -> bool:
        return bool(data) and any(t.startswith(data) or data.startswith(t) for t in self.left)

    def _bytes(self, token: int) -> bytes:
        return self.vocab.bytes[token] if 0 <= token < self.vocab.n else b""

    def allows(self, token: int) -> bool:
        data = self._bytes(int(token))
        if self.after is not None:         # free, unless the token writes the marker and a start none agrees with
            if not may_finish(self._seen, data, self.after):
                return True
            rest = text_after(self._seen + data, self.after, self.reasoning if self.repeat else None,
                              code_blocks=self.repeat)
            return not rest or self._agrees(rest)
        return not self.active or self._agrees(data)

    def advance(self, token: int) -> None:
        data = self._bytes(int(token))
        if self.after is not None:
            self._seen += data
            rest = text_after(self._seen, self.after, self.reasoning if self.repeat else None,
                              code_blocks=self.repeat)
            if rest is not None:
                self.after, self._seen = None, b""
                if rest:
                    self._consume(rest)
            return
        if self.active:
            self._consume(data)

    def _consume(self, data: bytes) -> None:
        self.left = [t[len(data):] if t.startswith(data) else b"" for t in self.left
                     if t.startswith(data) or data.startswith(t)]
        if self.repeat and not self.active:      # a start written: free until the next trigger
            self.left, self.after, self._seen = list(self.texts), self._trigger, b""

    def forced_bytes(self, after: bytes = b"") -> bytes:
        """What every still possible start writes next (after `after`; all of it once one is left); b"" while
        free, or once `after` writes a start whole."""
        left = [t[len(after):] for t in self.left if t.startswith(after)] if self.active else []
        return os.path.commonprefix(left) if left and all(left) else b""

    def allowed_mask(self) -> np.ndarray:
        unheld = unheld_mask(self.vocab, self.after, self.active, self.allows)
        if unheld is not None:
            return unheld
        mask = np.zeros(self.vocab.n, dtype=bool)
        for i in self.vocab.nonempty:
            mask[i] = self._agrees(self.vocab.bytes[i])
        return mask

    def best_allowed(self, logits: np.ndarray) -> int | None:
        """The allowed token of the highest logit (the lowest id on a tie)."""
        return best_in_mask(self.allowed_mask(), logits)
