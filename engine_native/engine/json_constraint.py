"""JSON output constrained while it is generated, token by token: `JsonConstraint(root, vocabulary, eos_ids)`
follows one answer through json_grammar.py's byte automaton and says which tokens may come next
(`allows`, `best_allowed`, `allowed_mask`), `advance`s on the chosen one, and allows the end of the answer
(an end-of-generation token) only once the top-level value is complete. With `after` set, the answer is
free until those bytes have been generated (a reasoning model's closing tag); with `trigger`, a value is
held each time the answer writes it (a tool call's JSON after each `<tool_call>`).

Not here: the automaton (json_grammar.py), the schema compiler (json_schema.py), the sampler (sampling.py
calls this), the API fields (server/structured_output.py).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from strata.engine.json_grammar import complete, step
from strata.engine.json_next_bytes import next_bytes, walk_first
from strata.engine.json_schema import Node
from strata.engine.token_bytes import (
    Vocabulary,
    bytes_through,
    forced_run,
    live_suffix,
    may_finish,
    text_after,
    waiting_mask,
)

# spacing_step's state: (the value has begun, inside a string, after a backslash there, spaces still owed)
SPACING_START = (False, False, False, 0)


def spacing_step(sp: tuple, b: int, spacing: tuple[bytes, bytes]) -> tuple | None:
    """The spacing state after byte b of a value written with exactly `spacing`'s whitespace, or None."""
    begun, in_str, esc, owed = sp
    if in_str:
        return (True, b != 0x22 or esc, b == 0x5C and not esc, 0)
    if b in (0x20, 0x09, 0x0A, 0x0D):
        if not begun:
            return None                          # the value follows its opening (a `lead`) at once
        return (True, False, False, owed - 1) if owed > 0 and b == 0x20 else None
    if begun and owed:
        return None                              # the space after ':' or ',' is missing
    owed = len(spacing[0]) - 1 if b == 0x2C else len(spacing[1]) - 1 if b == 0x3A else 0
    return (True, b == 0x22, False, owed)


def _hint(state: tuple) -> frozenset[int] | None:
    """The automaton's next-byte hint for a constraint's state (its grammar part: the rest only narrows)."""
    return next_bytes(state[:2])


class JsonConstraint:
    """One answer's automaton over tokens. `after`: bytes the answer may write freely before the JSON
    (a reasoning block's closing tag); the constraint starts once they have been generated. `lead`: bytes
    it must write first (`<tool_call>` before a call's JSON)."""

    def __init__(self, root: Node, vocabulary: Vocabulary, eos_ids: Iterable[int], after: bytes | None = None,
                 lead: bytes = b"", trigger: bytes | None = None, reasoning: tuple[bytes, bytes] | None = None,
                 opened: bool = False, close: bytes = b"", may_think: tuple[bytes, bytes] | None = None,
                 forbid: tuple[bytes, ...] = (), spacing: tuple[bytes, bytes] | None = None):
        self.vocab = vocabulary
        self.eos = frozenset(int(i) for i in eos_ids)
        # `forbid`: texts the value may not write (where the call's reader would end it: `</tool_call>`);
        # the state then carries the value's last bytes, (stack, ws, tail)
        self.forbid, self._blank = forbid, ((b"",) if forbid else ())
        # `spacing`: (after a comma, after a colon), e.g. (b", ", b": "): the value's whitespace is exactly the
        # spaces those put there and none elsewhere, as a template writes a call back (json.dumps), so the
        # next turn reads none of this answer again; the state's last element is then spacing_step's
        self.spacing = spacing
        if spacing is not None:
            self._blank += (SPACING_START,)
        # `lead`: bytes the answer must write before the value (special tokens may write them)
        self.state: tuple = ((("V", root),) + ((("P", lead, 0),) if lead else ()), 0) + self._blank
        self._initial = self.state
        # `trigger`: each time the answer writes it (outside a `reasoning` block), a value is held, then
        # `close` is written, then the answer is free again (a tool call's JSON after each `<tool_call>`)
        self.trigger, self.reasoning = trigger, reasoning
        # `close`: bytes forced after each held value (`\n</tool_call>`), from the byte that ends it on: one token
        # may end the value and begin them (`}}\n` where the pre-tokenizer keeps punctuation with newlines)
        self.close = close
        self._closing = ((("P", close, 0),), 0) + self._blank if close else None
        self.after = trigger if trigger is not None else after
        self._free = b""                     # the answer's bytes while waiting for `after`
        if opened and reasoning is not None:
            self._free = reasoning[0]        # the prompt opened the reasoning: the answer starts inside it
        self._memo: dict[tuple, tuple | None] = {}
        self._runs: dict[tuple, bytes] = {}    # forced_bytes' memo
        # `may_think`: an answer whose first token opens a reasoning block thinks freely until it closes,
        # then the value (a thinking model the prompt did not put in its reasoning)
        self.may_think = may_think if after is None and trigger is None and not lead else None

    @property
    def active(self) -> bool:
        return self.after is None

    def _step(self, state: tuple, b: int) -> tuple | None:
        key = (state, b)
        try:
            return self._memo[key]
        except KeyError:
            if len(self._memo) > 200_000:
                self._memo.clear()
            out = step(state[:2], b)
            in_value = bool(state[0]) and state[0][-1][0] != "P"
            if out is not None and self.forbid:
                tail = state[2] + bytes([b])
                if in_value and any(tail.endswith(f) for f in self.forbid):
                    out = None                   # markup the call's reader would end the value at
                else:
                    out = out + (live_suffix(tail, self.forbid),)
            if out is not None and self.spacing is not None:
                sp = spacing_step(state[-1], b, self.spacing) if in_value else state[-1]
                out = None if sp is None else out + (sp,)
            if out is not None and in_value and not out[0] and self._closing is not None:
                out = self._closing                      # the value (a call: an object) is whole
            self._memo[key] = out
            return out

    def _after_bytes(self, data: bytes) -> tuple | None:
        return bytes_through(self._step, self.state, data)

    def _after_token(self, token: int) -> tuple | None:
        return self._after_bytes(self.vocab.bytes[token])

    def _opens_thinking(self, token: int) -> bool:
        return (self.may_think is not None and 0 <= token < self.vocab.n
                and self.vocab.bytes[token].startswith(self.may_think[0]))

    def allows(self, token: int) -> bool:
        token = int(token)
        if self._opens_thinking(token):
            return True
        if not self.active:                      # free, unless the token writes the marker and more
            data = self.vocab.bytes[token] if 0 <= token < self.vocab.n else b""
            if not may_finish(self._free, data, self.after):
                return True
            rest = text_after(self._free + data, self.after, self.reasoning if self.trigger is not None else None,
                          code_blocks=self.trigger is not None)
            return rest is None or self._after_bytes(rest) is not None
        if token in self.eos:
            return complete(self.state[:2])
        if not 0 <= token < self.vocab.n or not self.vocab.bytes[token]:
            return False
        if token in self.vocab.special and not (self.state[0] and self.state[0][-1][0] == "P"):
            return False            # a special token's text is no JSON: only a lead may be written by one
        return self._after_token(token) is not None

    def advance(self, token: int) -> None:
        """Moves past a token the sampler chose (one `allows` accepted)."""
        token = int(token)
        if self._opens_thinking(token):                  # free until the reasoning closes
            assert self.may_think is not None
            self.after, data = self.may_think[1], self.vocab.bytes[token][len(self.may_think[0]):]
            self.may_think = None
            self._free_bytes(data)
            return
        self.may_think = None                            # only the first token may open it
        if not self.active:
            self._free_bytes(self.vocab.bytes[token] if 0 <= token < self.vocab.n else b"")
            return
        if token in self.eos:
            return
        nxt = self._after_token(token)
        if nxt is None:
            raise ValueError(f"json constraint: token {token} was not allowed here")
        self.state = nxt
        if not nxt[0] and self.trigger is not None:      # the value and its closing tag are whole: free until
            self.state, self.after, self._free = self._initial, self.trigger, b""    # the next trigger

    def forced_bytes(self, after: bytes = b"") -> bytes:
        """The bytes the value must write next (after `after`) whatever the model chooses: a key the schema
        names, the one tool's name, a call's markup and closing tag; b"" while the answer is free or could
        go two ways."""
        if not self.active or self.may_think is not None:
            return b""
        state = self._after_bytes(after)
        if state is None:
            return b""
        return forced_run(self._step, state, lambda s: complete(s[:2]), self._runs,     # the closing tag too
                          next_bytes=_hint)

    def bytes_after(self, data: bytes) -> frozenset[int] | None:
        """The bytes the value may write after `data` (its forced bytes: canonical_split reads whether the
        tokenizer's last piece of them is whole); None when the automaton does not say cheaply (a free
        string, a key of any name) or the value is whole there (what follows is free or the answer's end)."""
        if not self.active or self.may_think is not None:
            return None
        state = self._after_bytes(data)
        if state is None or complete(state[:2]):
            return None
        hint = _hint(state)
        return None if hint is None else frozenset(b for b in hint if self._step(state, b) is not None)

    def _allowed_ids(self) -> np.ndarray:
        """The ids allowed next while the value is held: the plain tokens the automaton takes (a walk over
        the vocabulary's prefixes), special ones looked at one by one (a lead, a reasoning opening), the end
        tokens once the value is whole."""
        more = [i for i in self.eos if 0 <= i < self.vocab.n]
        ids = self.vocab.walk(self.state, self._step, next_bytes=_hint)
        if more:                                   # a few end ids, compared one by one: ~3 us (np.isin ~14)
            keep = np.ones(ids.shape[0], dtype=bool)
            for i in more:
                keep &= ids != i
            ids = ids[keep]
        lead = bool(self.state[0]) and self.state[0][-1][0] == "P"
        if lead or self.may_think is not None:
            more += [int(i) for i in self.vocab.special_nonempty]
            if self.may_think is not None:
                more += [int(i) for i in self.vocab.by_first.get(self.may_think[0][0], ())]
        extra = [i for i in dict.fromkeys(more) if self.allows(i)]
        return np.union1d(ids, np.array(extra, dtype=np.int64)) if extra else ids

    def _free_bytes(self, data: bytes) -> None:
        """Bytes before `after` is seen; once it is, the JSON begins with what followed it."""
        assert self.after is not None
        self._free += data
        rest = text_after(self._free, self.after, self.reasoning if self.trigger is not None else None,
                          code_blocks=self.trigger is not None)
        if rest is not None:
            self.after, self._free = None, b""
            for b in rest:
                nxt = self._step(self.state, b)
                if nxt is not None:
                    self.state = nxt

    def feed(self, data: bytes) -> None:
        """Moves past bytes the answer starts with that no token chose (a prefill); ValueError when they
        cannot begin the value."""
        if data:
            self.may_think = None            # the answer has begun: it can no longer open its reasoning
        if not self.active:
            self._free_bytes(data)
            return
        for b in data:
            nxt = self._step(self.state, b)
            if nxt is None:
                raise ValueError(f"json constraint: {data!r} cannot begin the value")
            self.state = nxt

    def allowed_mask(self) -> np.ndarray:
        """(n_vocab,) bool: the tokens that may come next."""
        if not self.active:
            assert self.after is not None
            return waiting_mask(self.vocab, self.after, self.allows)
        mask = np.zeros(self.vocab.n, dtype=bool)
        mask[self._allowed_ids()] = True
        return mask

    def best_allowed(self, logits: np.ndarray) -> int | None:
        """The allowed token of the highest logit (the lowest id on a tie), or None when none is."""
        logits = np.asarray(logits, dtype=np.float32)
        if not (self.active and walk_first(self.state[:2])):    # a key or a value begins: the walk at once
            top = np.argpartition(-logits, 63)[:64] if logits.shape[0] > 64 else np.arange(logits.shape[0])
            first = top[np.lexsort((top, -logits[top]))]     # the 64 best, best first, lower id first on a tie
            for i in first:
                if logits[i] > logits[first[-1]] and self.allows(int(i)):   # ties at the cut: the full sort
                    return int(i)
        order = self._allowed_ids() if self.active else np.flatnonzero(self.allowed_mask())
        if order.size == 0:
            return None
        best = order[np.lexsort((order, -logits[order]))[0]]
        return None if not np.isfinite(logits[best]) and logits[best] < 0 else int(best)
