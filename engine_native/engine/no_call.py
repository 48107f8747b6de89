"""An answer kept off tool calls while the prompt still shows the tools: OpenAI's `tool_choice: "none"`,
Anthropic's `{"type": "none"}`, whose prompt writes the conversation's tools (so its history is reused) and
whose answer must be text only.

What it is: `NoCall(markers, vocabulary, reasoning=None, opened=False, code_blocks=True, harmony=False,
bare_calls=False)`, a sampler constraint (sampling.py's protocol, as forced_start.ForcedStart): every token is
allowed but one that would finish writing a call's marker (`<tool_call>`, `[TOOL_CALLS]`, Harmony's recipient `to=`) where the call
readers take it as a call's opening: outside a reasoning block (`reasoning`'s tags; `opened`: the prompt
opened it) and, with `code_blocks`, outside a fenced code block opened after prose; with `harmony`, only in a
message's header (harmony.in_header: any recipient there makes the message a call, `to=python` or
`to=functions:x` as well as `to=functions.x`, its text then lost), free in the bodies. A marker that is one
special token is that token banned (as `logit_bias` -100 bans one); a marker of several tokens is refused at
the token that would write its last byte, so the model writes something else there. With `bare_calls`
(Llama 3's format, whose calls have no marker), the token that would make the answer a bare JSON call's start
(bare_call_scan.py: its first object's "name" a string beside an "arguments" / "parameters" key, after any
reasoning) is refused too; a JSON answer that is no call is left whole.

What it is not: which markers a model's calls open with (the server: structured_output.no_call_markers), or
reading the answer (with no tool callable, the server reads it as text whatever it holds).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from strata.engine.bare_call_scan import CALLED, FREE, bare_call_scan, bare_call_start
from strata.engine.harmony import in_header
from strata.engine.token_bytes import Vocabulary, best_in_mask, may_finish, text_after


class NoCall:
    def __init__(self, markers: Sequence[bytes], vocabulary: Vocabulary, reasoning: tuple[bytes, bytes] | None = None,
                 opened: bool = False, code_blocks: bool = True, prefix: bytes = b"", harmony: bool = False,
                 bare_calls: bool = False):
        self.markers = tuple(m for m in markers if m)
        if not self.markers:
            raise ValueError("NoCall: needs at least one non-empty call marker")
        self.vocab = vocabulary
        self.reasoning, self.code_blocks, self.harmony = reasoning, code_blocks, harmony
        # the answer's bytes so far (the prompt may have opened the reasoning; `prefix`: a prefill the request
        # wrote, which the answer continues); a bytearray, grown in place: bytes' += copied the whole answer
        # at every token
        self._seen = bytearray((reasoning[0] if opened and reasoning is not None else b"") + prefix)
        # a bare JSON call's start (bare_call_scan.py), watched from the answer's start; one the prefill wrote
        # itself cannot be refused
        self._bare: object = FREE
        self._bare_after: tuple[bytes, object] | None = None    # allows' last look, which advance reuses
        if bare_calls:
            self._bare = bare_call_scan(bare_call_start(reasoning, opened), prefix, reasoning)
            self._bare = FREE if self._bare == CALLED else self._bare

    def _bytes(self, token: int) -> bytes:
        return self.vocab.bytes[token] if 0 <= token < self.vocab.n else b""

    def allows(self, token: int) -> bool:
        data = self._bytes(int(token))
        if self._bare != FREE and self._bare_scan(data) == CALLED:
            return False
        return not any(may_finish(self._seen, data, m) and self._opens_call(self._seen + data, m)
                       for m in self.markers)

    def _opens_call(self, text: bytes, marker: bytes) -> bool:
        """Whether `text` (the answer with the token) holds `marker` where a reader takes it as a call's opening."""
        if not self.harmony:
            return text_after(text, marker, self.reasoning, code_blocks=self.code_blocks) is not None
        # the marker this token finishes: one that ends in its bytes (those before were refused or in a body)
        start = max(0, len(self._seen) - len(marker) + 1)
        at = text.find(marker, start)
        while at >= 0:
            if in_header(text[:at].decode("utf-8", "replace")):
                return True
            at = text.find(marker, at + 1)
        return False

    def advance(self, token: int) -> None:
        data = self._bytes(int(token))
        self._seen += data
        if self._bare != FREE:
            self._bare = self._bare_scan(data)
            self._bare = FREE if self._bare == CALLED else self._bare   # written anyway (a forced token)
        self._bare_after = None

    def _bare_scan(self, data: bytes) -> object:
        """The bare-call state after `data` (the sampler asks allows, then advances on the same token)."""
        if self._bare_after is None or self._bare_after[0] != data:
            self._bare_after = (data, bare_call_scan(self._bare, data, self.reasoning))
        return self._bare_after[1]

    def forced_bytes(self, after: bytes = b"") -> bytes:
        """Nothing is ever forced: the answer is the model's own text."""
        return b""

    def allowed_mask(self) -> np.ndarray:
        mask = np.ones(self.vocab.n, dtype=bool)
        lasts = {m[-1] for m in self.markers} | ({ord('"')} if self._bare != FREE else set())
        for last in lasts:      # only a token holding a marker's last byte (a bare call's quote) can finish it
            for i in self.vocab.containing(last):
                mask[i] = self.allows(int(i))
        return mask

    def best_allowed(self, logits: np.ndarray) -> int | None:
        """The allowed token of the highest logit (the lowest id on a tie)."""
        return best_in_mask(self.allowed_mask(), logits)
