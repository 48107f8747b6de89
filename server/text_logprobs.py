"""Which generated tokens a piece of an answer's text came from, for the Responses API's `logprobs`: an
`output_text` part carries the entries of its own tokens only, not those of the reasoning before it nor
of the tool-call markup around it (OpenAI's shape, `{token, logprob, bytes, top_logprobs}`).

`TokenText` follows one answer: `add_tokens` with sampling.token_logprobs entries as they are sampled,
`add_text` with the decoded text as it comes (the scheduler sends a token's entry before its text), then
each piece the answer's reader gives out, in order, is placed in that text: `take(piece)` returns the
entries of the tokens that wrote it, `skip(piece)` passes over a piece that is no output text, `take_tail(piece)`
places the text a reader gives after the calls where it ends the answer. A token
counts for the piece its text overlaps first; tokens between pieces (a `</think>`, a call's markup) go
to none. A piece not found verbatim in the text (a reader that rewrote it) gets no entries.

Not here: computing the log-probabilities (sampling.token_logprobs, in the scheduler), the other APIs'
shapes (openai_api).
"""

from __future__ import annotations

import codecs
from typing import Any

from strata.server.openai_api import logprob_entry


class TokenText:
    """One answer's tokens, each with the characters of the decoded text it wrote ([start, end))."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._spans: list[tuple[int, int, tuple]] = []   # (start, end, entry) per token, in order
        self._n_chars = 0          # characters the tokens so far decode to
        self._next = 0             # the first token not yet given to a piece or passed
        self.text = ""             # the answer's text so far
        self._cursor = 0           # where in `text` the pieces placed so far end

    def add_tokens(self, entries: list) -> None:
        for entry in entries:
            n = len(self._decoder.decode(self._tokenizer.token_bytes(entry[0])))
            # a token that only begins a character writes nothing: it goes with the token that ends it
            self._spans.append((self._n_chars, self._n_chars + n, entry))
            self._n_chars += n

    def add_text(self, text: str) -> None:
        self.text += text

    def take(self, piece: str) -> list[dict]:
        """The OpenAI entries of the tokens that wrote `piece`, the next piece of output text."""
        return [logprob_entry(self._tokenizer, e) for e in self._place(piece)]

    def take_tail(self, piece: str) -> list[dict]:
        """The entries of `piece`, output text that ends the answer (a reader's text after the calls): placed
        where only whitespace follows it, not at an earlier match (inside a call's arguments); none when it
        is not there verbatim (text gathered from between calls)."""
        at = self.text.rfind(piece, self._cursor) if piece else -1
        if at < 0 or self.text[at + len(piece):].strip():
            return []
        return [logprob_entry(self._tokenizer, e) for e in self._place_at(at, len(piece))]

    def skip(self, piece: str) -> None:
        """Passes over `piece`, text that is not output text (reasoning)."""
        self._place(piece)

    def _place(self, piece: str) -> list[tuple]:
        at = self.text.find(piece, self._cursor) if piece else -1
        return self._place_at(at, len(piece)) if at >= 0 else []

    def _place_at(self, at: int, length: int) -> list[tuple]:
        end = at + length
        self._cursor = end
        spans, i = self._spans, self._next
        while i < len(spans) and spans[i][1] <= at and spans[i][0] < at:   # wrote only text before the piece
            i += 1
        first = i
        while i < len(spans) and spans[i][0] < end:
            i += 1
        self._next = i
        return [s[2] for s in spans[first:i]]
