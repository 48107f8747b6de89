"""Text a held answer must write, written in the tokens the tokenizer itself would cut it into.

Why: a held answer's fixed text (a call's markup, the one tool's name, a key the schema names) can be
written in many token splits, and the model, held to its bytes, often picks another split than the
tokenizer's ('g' 'et' for 'get'). The next turn renders the answer back and tokenizes it, so the
conversation's history differs from that token on and is read again from there. Written in the
tokenizer's own split, the next turn reuses the whole answer (and the model reads the split it was
trained on).

What it is: `CanonicalSplit(constraint, tokenizer)`, a sampler constraint (sampling.py's protocol) around
one that can say which bytes it forces (`forced_bytes`: json_constraint.JsonConstraint, held_call.HeldCall,
forced_start.ForcedStart). Its `forced_token()` is the next token of the tokenizer's split of those bytes,
read in the context of the answer so far, for as long as the split is certain: the tokenizer's pieces
(its pre-tokenizer's) that end inside the forced bytes; the last piece could still grow with what the
model writes next (unless it is a token parsed whole, special or added: `</think>`), and so could a markup
token the forced bytes end inside of, so the model writes those, as before. None when nothing is forced,
when the answer so far ends inside one of the tokenizer's tokens (its split already differs), and for
SentencePiece vocabularies (no pieces: nothing is certain before the answer's end). `resplit(token)` cuts a free choice that runs on into forced text as the tokenizer would;
`upcoming()` is the forced tokens ahead (the scheduler reads them in one step).

Not here: which bytes are forced (the constraints), the choice of a free token (sampling.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

# the answer's bytes the split is read with: from after the last newline (a piece boundary in every
# pre-tokenizer), at most this many
CONTEXT_BYTES = 256
_CONTINUATION = bytes(range(0x80, 0xC0))    # UTF-8's bytes after a character's first


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def canonical_plan(tokenizer: Any, before: bytes, ahead: bytes,
                   may_follow: frozenset[int] | None = None) -> list[int]:
    """The tokenizer's tokens for `ahead` written after `before` (the answer so far, from a piece boundary),
    up to the start of the last piece; [] when the tokenizer cuts a token across where `before` ends.
    `may_follow`: the bytes the answer may write after `ahead` (ASCII ones; None: any): when the tokenizer
    ends a piece where `ahead` ends whichever of them follows (` {"` before a key's letter), the last piece
    is certain too and its tokens are part of the plan."""
    head = _utf8(before)
    if head is None:                          # the answer ends inside a character
        return []
    ahead_text = ahead.decode("utf-8", errors="ignore")   # drops a character cut at the end
    if not ahead_text:
        return []
    text = head + ahead_text
    spans = tokenizer.encode_spans(text)
    start, certain = len(head), tokenizer.unfinished_markup(text)
    first = next((k for k, (_, a, _, _) in enumerate(spans) if a >= start), None)
    if first is None or spans[first][1] != start or any(b > start for _, _, b, _ in spans[:first]):
        return []
    if certain == len(text) and _piece_ends(tokenizer, text, spans, may_follow):
        return [token for token, _, _, _ in spans[first:]]
    last_piece = spans[-1][3]
    # tokens the tokenizer parses whole (special or added: `</think>`) never grow with what follows
    whole = getattr(tokenizer, "parsed_ids", None) or getattr(tokenizer, "special_ids", frozenset())
    plan = []
    for token, _, end, piece in spans[first:]:
        if end > certain or (piece == last_piece and token not in whole):   # may change with what follows
            break
        plan.append(token)
    return plan


def _piece_ends(tokenizer: Any, text: str, spans: list, may_follow: frozenset[int] | None) -> bool:
    """Whether the tokenizer cuts `text` (its `spans`) into the same tokens, a piece ending where `text`
    ends, whichever byte of `may_follow` comes next (ASCII bytes only: one character each; a set with
    another byte, an empty or unknown one: False)."""
    if not may_follow or any(b >= 0x80 for b in may_follow):
        return False
    n = len(text)
    for b in may_follow:
        longer = tokenizer.encode_spans(text + chr(b))
        if longer[:len(spans)] != spans or any(a < n < e for _, a, e, _ in longer):
            return False
        if len(longer) > len(spans) and longer[len(spans)][3] == spans[-1][3]:
            return False                      # the next byte's token is in the same piece: it may merge
    return True


class CanonicalSplit:
    """A constraint whose forced text is written in the tokenizer's split (module docstring)."""

    def __init__(self, constraint: Any, tokenizer: Any):
        self.inner = constraint
        self.tokenizer = tokenizer
        self.special = frozenset(getattr(tokenizer, "special_ids", ()))
        self._text = b""           # the answer since its start or last special token (a piece boundary)
        self._plan: list[int] = []
        self._lone = b""           # forced bytes no token may write alone (or a start of): _joined_last_piece

    def __getattr__(self, name: str) -> Any:     # the rest of the constraint's surface
        return getattr(self.inner, name)

    def allows(self, token: int) -> bool:
        return self.inner.allows(token) and not self._cut_short(token)

    def allowed_mask(self) -> Any:
        mask = self.inner.allowed_mask()
        if self._lone:
            for token in np.flatnonzero(mask):
                if self._cut_short(int(token)):
                    mask[token] = False
        return mask

    def best_allowed(self, logits: Any) -> int | None:
        best = self.inner.best_allowed(logits)
        if best is not None and self._cut_short(best):
            logits = np.array(logits, dtype=np.float32, copy=True)
            while best is not None and self._cut_short(best):
                logits[best] = -np.inf
                best = self.inner.best_allowed(logits)
        return best

    def _cut_short(self, token: int) -> bool:
        """Whether `token` writes the forced text's last piece, or a start of it, alone where the tokenizer
        joins that piece with every byte that may follow (`_lone`, set by forced_token)."""
        if not self._lone or token in self.special or not 0 <= int(token) < self.tokenizer.n_vocab:
            return False
        data = self.tokenizer.token_bytes(int(token))
        return bool(data) and self._lone.startswith(data)

    def _joined_last_piece(self, forced: bytes, follow: frozenset[int] | None) -> bytes:
        """`forced` when the tokenizer writes it, after the answer so far, in a token that runs on into each
        byte of `follow` (` {` before `"` or `}`: ` {"`, ` {}`) and the automaton takes one such token;
        else b"". A nested object with no required key opens with ` {` forced and the key or `}` the model's
        choice: the model wrote ` {` `"` where the next turn reads ` {"`, and that turn read the rest of the
        call again (39 tokens a turn in a multi-agent trial's Task calls)."""
        head, tail = _utf8(self._context()), _utf8(forced)
        if head is None or tail is None or not follow or any(b >= 0x80 for b in follow):
            return b""
        text = head + tail
        start, end = len(head), len(text)
        joined = []
        for b in follow:
            first = next((s for s in self.tokenizer.encode_spans(text + chr(b)) if s[2] > start), None)
            if first is None or first[1] != start or first[2] <= end:
                return b""                        # the split differs before it, or a piece may end there
            joined.append(first[0])
        return forced if any(self.inner.allows(t) for t in joined) else b""

    def advance(self, token: int) -> None:
        token = int(token)
        self.inner.advance(token)
        self._lone = b""
        if self._plan and self._plan[0] == token:
            self._plan.pop(0)
        else:
            self._plan = []
        if token in self.special:
            self._text = b""
        elif 0 <= token < self.tokenizer.n_vocab:
            self._text = self._text + self.tokenizer.token_bytes(token)
            if len(self._text) > 2 * CONTEXT_BYTES:
                self._text = self._text[-CONTEXT_BYTES:]

    def _context(self) -> bytes:
        """The answer's last bytes from after a newline (where a piece starts), at most CONTEXT_BYTES; a tail
        cut from a longer line starts at a character (a JSON call is one line: its text may be any)."""
        tail = self._text[-CONTEXT_BYTES:]
        cut = tail.rfind(b"\n")
        if cut >= 0 or len(self._text) <= CONTEXT_BYTES:
            return tail[cut + 1:]
        return tail.lstrip(_CONTINUATION)

    def resplit(self, token: int) -> int:
        """The model's free choice, or the tokenizer's token in its place when the choice runs on into forced
        text and the tokenizer cuts the two otherwise (`"}` before a forced `}`: the tokenizer writes `"` `}}`).
        The text is the same, a start of it (the model chooses again after a shorter token), or it and forced
        bytes after it (`"` before a forced `}}`: the tokenizer writes `"}}`)."""
        token = int(token)
        if token in self.special or not 0 <= token < self.tokenizer.n_vocab:
            return token
        data = self.tokenizer.token_bytes(token)
        forced = self.inner.forced_bytes(data)
        if not forced:
            return token
        plan = canonical_plan(self.tokenizer, self._context(), data + forced)
        return plan[0] if plan and plan[0] != token and self.inner.allows(plan[0]) else token

    def upcoming(self) -> list[int]:
        """The tokens forced_token will name next, in order (a draft the scheduler checks in one step:
        each is taken whatever the logits say)."""
        return list(self._plan) if self.forced_token() is not None else []

    def forced_token(self) -> int | None:
        """The next token of the forced text in the tokenizer's split, or None (the model chooses)."""
        if not self._plan:
            self._lone = b""
            forced = self.inner.forced_bytes()
            if not forced:
                return None
            after = getattr(self.inner, "bytes_after", None)
            follow = after(forced) if after is not None else None
            self._plan = canonical_plan(self.tokenizer, self._context(), forced, follow)
            if not self._plan:
                self._lone = self._joined_last_piece(forced, follow)
        if self._plan and not self.inner.allows(self._plan[0]):
            self._plan = []
        return self._plan[0] if self._plan else None
