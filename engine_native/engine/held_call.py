"""The token side of a held tool call (keyed_call.py's key-value markup, json_args_call.py's Harmony and
Mistral calls):
`HeldCall`, a sampler constraint (sampling.py's protocol, as json_constraint.JsonConstraint) over a byte
automaton its subclass defines (`_start`, `_step_uncached`, `_markup`). With `trigger`, the answer is free
until it writes the call's marker (outside its reasoning), the call is held until its automaton reaches
("done",), then the answer is free again until the next marker; without, the answer begins with the call
(after `after`, a thinking model's closing tag when the prompt opened its reasoning) and is free after it.
While a call is held the answer cannot end, and a special token may write only the call's markup.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from strata.engine.token_bytes import (
    Vocabulary,
    bytes_through,
    forced_run,
    may_finish,
    text_after,
    unheld_mask,
)

DONE = ("done",)
_SPACES = frozenset(b" \t\r\n")


class HeldCall:
    _start: tuple

    def __init__(self, vocabulary: Vocabulary, eos_ids: Sequence[int] = (), trigger: bytes | None = None,
                 reasoning: tuple[bytes, bytes] | None = None, opened: bool = False, after: bytes | None = None,
                 code_blocks: bool = True):
        self.vocab = vocabulary
        # a marker in a code block opened after prose is text to the readers (code_fences.py): not held
        # (`code_blocks` False: a format whose calls are messages of their own, Harmony's)
        self.code_blocks = trigger is not None and code_blocks
        self.eos = frozenset(int(i) for i in eos_ids)
        self.trigger, self.reasoning = trigger, reasoning
        self.after = trigger if trigger is not None else after
        self._seen = reasoning[0] if opened and reasoning is not None else b""
        self._memo: dict[tuple, tuple | None] = {}
        self._runs: dict[tuple, bytes] = {}    # forced_bytes' memo

    def _begin(self, start: tuple) -> None:
        self._start = start
        self.state: tuple = start

    @property
    def active(self) -> bool:
        return self.after is None and self.state != DONE

    def _step_uncached(self, state: tuple, b: int) -> tuple | None:
        raise NotImplementedError

    def _markup(self, state: tuple) -> bool:
        """Whether a special token may write the next bytes in `state` (the call's markup, not its values)."""
        raise NotImplementedError

    def _may_end(self, state: tuple) -> bool:
        """Whether the answer's end token ends the call in `state` (Harmony's <|call|> after the arguments)."""
        return False

    def _expand(self, then: tuple) -> tuple:
        """The state a `lits` alternative names, made concrete (a subclass's named states)."""
        return then

    def _lits_step(self, state: tuple, b: int) -> tuple | None:
        """("lits", alternatives, pos): one of the byte strings must be written, each (data, then-state); a
        longer one goes on while b continues it, else one written whole hands b to its then-state."""
        _, alts, pos = state
        going = tuple(a for a in alts if len(a[0]) > pos and a[0][pos] == b)
        if going:
            whole = [a for a in going if len(a[0]) == pos + 1]
            if len(going) == 1 and whole:
                return self._expand(whole[0][1])
            return ("lits", going, pos + 1)
        for data, then in alts:
            if len(data) == pos:
                return self._step(self._expand(then), b)
        return None

    def _next_bytes(self, state: tuple) -> frozenset[int] | None:
        """A superset of the bytes `state` takes, or None (any may): forced_run tries only these. The markup's
        next bytes (and, where an alternative is whole, those of the state it names); a subclass's own states
        say theirs (`_own_next_bytes`)."""
        if state == DONE:
            return _SPACES
        if state[0] != "lits":
            return self._own_next_bytes(state)
        _, alts, pos = state
        out = frozenset(data[pos] for data, _ in alts if len(data) > pos)
        for data, then in alts:
            if len(data) == pos:
                more = self._next_bytes(self._expand(then))
                if more is None:
                    return None
                out |= more
        return out

    def _own_next_bytes(self, state: tuple) -> frozenset[int] | None:
        return None

    def _walk_first(self, state: tuple) -> bool:
        """Whether best_allowed should walk the vocabulary at once (json_next_bytes.walk_first): in the call's
        markup and names (the model's best tokens are mostly words these refuse); a subclass's states say."""
        return state != DONE and state[0] == "lits"

    def _step(self, state: tuple, b: int) -> tuple | None:
        if state == DONE:        # in the token that finished the call, only whitespace: a reader of runs of calls
            return DONE if b in b" \t\r\n" else None    # (GLM's, Seed-OSS's, Mistral's) reads the next as text
        key = (state, b)
        if key not in self._memo:
            if len(self._memo) > 100_000:
                self._memo.clear()
            self._memo[key] = self._step_uncached(state, b)
        return self._memo[key]

    def _bytes(self, token: int) -> bytes:
        return self.vocab.bytes[token] if 0 <= token < self.vocab.n else b""

    def _from(self, state: tuple | None, data: bytes) -> tuple | None:
        """The state after `data`, None when the call refuses it."""
        return bytes_through(self._step, state, data)

    def _after_token(self, token: int) -> tuple | None:
        return self._from(self.state, self.vocab.bytes[token])

    # ----- the sampler's protocol -----

    def allows(self, token: int) -> bool:
        token = int(token)
        if self.after is not None:               # free, unless the token writes the marker and more
            if not may_finish(self._seen, self._bytes(token), self.after):
                return True
            rest = text_after(self._seen + self._bytes(token), self.after,
                              self.reasoning if self.trigger is not None else None, code_blocks=self.code_blocks)
            return rest is None or self._from(self.state, rest) is not None
        if not self.active:
            return True
        if token in self.eos:
            return self._may_end(self.state)         # the call must be finished first
        if not 0 <= token < self.vocab.n or not self.vocab.bytes[token]:
            return False
        if token in self.vocab.special and not self._markup(self.state):
            return False                             # a special token writes only the markup
        return self._after_token(token) is not None

    def advance(self, token: int) -> None:
        token = int(token)
        if not self.active and self.after is None:
            return                                   # the call is whole and no more are held
        if token in self.eos and self.after is None and self._may_end(self.state):
            self._whole()
            return
        self._feed(self._bytes(token))

    def _whole(self) -> None:
        """The call is whole: free from here on, or until the next call's marker."""
        self.state = DONE
        if self.trigger is not None:
            self.state, self.after, self._seen = self._start, self.trigger, b""

    def _feed(self, data: bytes) -> None:
        for i, b in enumerate(data):
            if self.after is not None:
                self._wait(data[i:])
                return
            if self.state == DONE:
                return
            nxt = self._step(self.state, b)
            if nxt is None:
                raise ValueError(f"held call: {data!r} was not allowed here")
            self.state = nxt
            if nxt == DONE and self.trigger is not None:   # free until the next call's marker
                self.state, self.after, self._seen = self._start, self.trigger, b""

    def _wait(self, data: bytes) -> None:
        assert self.after is not None
        self._seen += data
        rest = text_after(self._seen, self.after, self.reasoning if self.trigger is not None else None,
                         code_blocks=self.code_blocks)
        if rest is not None:
            self.after, self._seen = None, b""
            self._feed(rest)

    def forced_bytes(self, after: bytes = b"") -> bytes:
        """The bytes the call must write next (after `after`) whatever the model chooses: its markup, a name
        or key only one offered fits; b"" while the answer is free or could go two ways."""
        state = self._from(self.state, after) if self.active else None
        if state is None or state == DONE:
            return b""
        return forced_run(self._step, state, self._may_end, self._runs, next_bytes=self._next_bytes)

    def allowed_mask(self) -> np.ndarray:
        unheld = unheld_mask(self.vocab, self.after, self.active, self.allows)
        if unheld is not None:
            return unheld
        mask = np.zeros(self.vocab.n, dtype=bool)
        # the plain tokens the call takes (a walk over the vocabulary's prefixes; any bytes once it is whole),
        # the special ones one by one (they may write its markup); never an end while it is open
        mask[self.vocab.walk(self.state, self._step, next_bytes=self._next_bytes)] = True
        if self._markup(self.state):                 # elsewhere allows refuses every special token
            for i in self.vocab.special_nonempty:
                mask[i] = self.allows(int(i))
        mask[[i for i in self.eos if 0 <= i < self.vocab.n]] = self._may_end(self.state)
        return mask

    def best_allowed(self, logits: np.ndarray) -> int | None:
        """The allowed token of the highest logit (the lowest id on a tie), or None when none is."""
        logits = np.asarray(logits, dtype=np.float32)
        if not (self.active and self._walk_first(self.state)):   # else the walk at once
            top = np.argpartition(-logits, 63)[:64] if logits.shape[0] > 64 else np.arange(logits.shape[0])
            first = top[np.lexsort((top, -logits[top]))]
            for i in first:
                if logits[i] > logits[first[-1]] and self.allows(int(i)):   # ties at the cut: the full scan
                    return int(i)
        ids = np.flatnonzero(self.allowed_mask())
        if ids.size == 0:
            return None
        best = int(ids[np.argmax(logits[ids])])      # the first of the highest: the lowest id on a tie
        # every allowed token banned (-inf): none, as JsonConstraint says (an arg-max over the masked row
        # gave token 0 then, allowed or not)
        return None if logits[best] == -np.inf else best
