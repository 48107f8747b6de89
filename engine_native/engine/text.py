"""Streaming detokenization: token ids in, whole UTF-8 characters out.

What it is: `StreamDecoder(tokenizer)`. A byte-level BPE token can end in the middle of a UTF-8
character (an emoji is often 2 to 4 tokens); `.push(token_id)` returns only the characters that are
complete so far and keeps the rest, `.flush()` returns what is left at the end of the stream (an
unfinished character becomes U+FFFD, as do bytes that can never be UTF-8). Joining every push and
the flush gives exactly `tokenizer.decode(ids)`.

What it is not: stop-string matching or holding text back for it (the server does that).
"""

from __future__ import annotations

import codecs


class StreamDecoder:
    def __init__(self, tokenizer, *, skip_special: bool = False):
        self._tokenizer = tokenizer
        self._skip_special = skip_special
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """The text that token completes (possibly "" while a character is unfinished)."""
        if self._skip_special and int(token_id) in self._tokenizer.special_ids:
            return ""
        return self._decoder.decode(self._tokenizer.token_bytes(token_id))

    def push_many(self, token_ids) -> str:
        return "".join(self.push(t) for t in token_ids)

    def flush(self) -> str:
        """What is left at the end of the stream; the decoder is then ready for a new stream."""
        out = self._decoder.decode(b"", final=True)
        self._decoder.reset()
        return out

    @property
    def pending(self) -> bool:
        """True while bytes of an unfinished character are held back."""
        return bool(self._decoder.getstate()[0])
