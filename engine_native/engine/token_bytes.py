"""What the held-answer constraints (json_constraint.py, forced_start.py, held_call.py) know of tokens:
`Vocabulary`, each token's bytes, which are special (never free text), the tokens by first byte (and by a
byte they hold); `text_after`, the wait for a marker (a closing reasoning tag, a call's opening) outside a
reasoning block (and for a call's opening, outside a code block: code_fences.py), with `may_finish` and
`waiting_mask`, what a constraint allows while it waits.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from strata.engine.code_fences import in_code_block


class Vocabulary:
    """Each token's bytes and which tokens may never appear in a JSON answer (special tokens)."""

    def __init__(self, token_bytes: Sequence[bytes], special_ids: Iterable[int] = ()):
        self.bytes = list(token_bytes)
        self.n = len(self.bytes)
        self.special = frozenset(int(i) for i in special_ids)
        by_first: dict[int, list[int]] = {}
        for i, tb in enumerate(self.bytes):
            if tb and i not in self.special:
                by_first.setdefault(tb[0], []).append(i)
        self.by_first = {b: np.array(ids, dtype=np.int64) for b, ids in by_first.items()}
        self.nonempty = np.array([i for i, tb in enumerate(self.bytes) if tb], dtype=np.int64)
        self.special_nonempty = np.array(sorted(i for i in self.special if 0 <= i < self.n and self.bytes[i]),
                                         dtype=np.int64)
        self._containing: dict[int, np.ndarray] = {}
        self._by_bytes: tuple[list[bytes], np.ndarray, list[int]] | None = None

    def containing(self, b: int) -> np.ndarray:
        """The ids of the tokens whose bytes hold byte b (built once per byte): the only ones that can finish
        writing a marker that ends in b."""
        if b not in self._containing:
            self._containing[b] = np.array([i for i, tb in enumerate(self.bytes) if b in tb], dtype=np.int64)
        return self._containing[b]

    def _sorted(self) -> tuple[list[bytes], np.ndarray, list[int]]:
        """The plain tokens' bytes in byte order, their ids, and how many bytes each shares with the one
        before (built once, on the first walk)."""
        if self._by_bytes is None:
            ids = sorted((i for i, tb in enumerate(self.bytes) if tb and i not in self.special),
                         key=lambda i: self.bytes[i])
            data = [self.bytes[i] for i in ids]
            shared = [0] + [_common(a, b) for a, b in zip(data, data[1:], strict=False)]
            self._by_bytes = (data, np.array(ids, dtype=np.int64), shared)
        return self._by_bytes

    def walk(self, state: Any, step: Any, free: Any = None, next_bytes: Any = None) -> np.ndarray:
        """The ids of the plain (not special) tokens whose bytes `step(state, b)` takes one by one (None:
        refused); `free(state)`: from that state on any bytes go (a held call whole). The tokens in byte order
        share their prefixes' states, and a refused prefix skips every token that begins with it: a mask
        costs the prefixes the automaton takes, not the vocabulary (where whitespace may come, the ~20,000
        tokens that begin with a space are one step and a refusal per second byte). `next_bytes(state)`: a
        superset of the bytes a state takes, or None (forced_run's hint): for a token's first two bytes, where
        the refusals are many, the walk leaps from a byte it leaves out to the next it names, with no step."""
        data, ids, shared = self._sorted()
        out: list[int] = []
        states = [state]                  # states[d]: after the first d bytes of the current token
        hints = [_hint(next_bytes, state)]     # hints[d]: (sorted, set) of next_bytes(states[d]), or None
        i, n = 0, len(data)
        while i < n:
            tb = data[i]
            keep = min(shared[i], len(states) - 1) + 1
            del states[keep:], hints[keep:]
            skip = -1
            while len(states) <= len(tb):
                if free is not None and free(states[-1]):
                    break
                d = len(states) - 1
                hint = hints[d]
                if hint is not None and tb[d] not in hint[1]:     # refused unstepped: on to the next byte named
                    skip = _next_named(data, tb[:d], hint[0], tb[d], i)
                    break
                nxt = step(states[-1], tb[d])
                if nxt is None:
                    skip = _past_prefix(data, tb[:d + 1], i)     # the prefix is refused: skip its tokens
                    break
                states.append(nxt)
                hints.append(_hint(next_bytes, nxt) if d + 1 < _HINT_DEPTH else None)
            if skip < 0:
                out.append(i)
                i += 1
            else:
                i = skip
        return ids[out] if out else np.zeros(0, dtype=np.int64)

    @classmethod
    def of(cls, tokenizer: Any) -> Vocabulary:
        """The vocabulary of a strata Tokenizer (built once per tokenizer)."""
        cached = getattr(tokenizer, "_json_vocabulary", None)
        if cached is None:
            cached = cls([tokenizer.token_bytes(i) for i in range(tokenizer.n_vocab)], tokenizer.special_ids)
            tokenizer._json_vocabulary = cached
        return cached


def live_suffix(data: bytes, texts: Sequence[bytes]) -> bytes:
    """The longest end of `data` that begins one of `texts` without being all of it: all a held part keeps
    of what it wrote to see a text (a tag, a forbidden marker) being written, so that states that differ only
    in older bytes are one state (and the constraints' memos hit)."""
    for k in range(min(len(data), max(map(len, texts)) - 1), 0, -1):
        end = data[-k:]
        if any(len(t) > k and t.startswith(end) for t in texts):
            return end
    return b""


_HINT_DEPTH = 2        # a walk asks next_bytes of the states after a token's first 0 and 1 bytes (the wide fan-outs)


def _hint(next_bytes: Any, state: Any) -> tuple[list[int], frozenset[int]] | None:
    """next_bytes(state) sorted and as a set, or None (no hint, or none asked)."""
    named = None if next_bytes is None else next_bytes(state)
    return None if named is None else (sorted(named), frozenset(named))


def _next_named(data: list[bytes], prefix: bytes, named: list[int], refused: int, lo: int) -> int:
    """The first index from `lo` in sorted `data` of a token that begins with `prefix` and then a byte of
    `named` (sorted) above `refused`; past the tokens that begin with `prefix` when there is none."""
    k = bisect.bisect_right(named, refused)
    if k < len(named):
        return bisect.bisect_left(data, prefix + bytes([named[k]]), lo)
    return _past_prefix(data, prefix, lo)


def _common(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def _past_prefix(data: list[bytes], prefix: bytes, lo: int) -> int:
    """The first index from `lo` in sorted `data` whose bytes do not begin with `prefix`."""
    end = prefix.rstrip(b"\xff")
    if not end:
        return len(data)
    return bisect.bisect_left(data, end[:-1] + bytes([end[-1] + 1]), lo)


def waiting_mask(vocab: Vocabulary, marker: bytes, allows: Any) -> np.ndarray:
    """(n_vocab,) bool while a constraint waits for `marker`: every token, less those that finish writing it
    with more the held part refuses (`allows` says; only tokens holding the marker's last byte can)."""
    mask = np.ones(vocab.n, dtype=bool)
    for i in vocab.containing(marker[-1]):
        mask[i] = allows(int(i))
    return mask


def may_finish(seen: bytes, data: bytes, marker: bytes) -> bool:
    """Whether `data` after `seen` can finish writing `marker` (its end inside `data`): else a waiting
    constraint allows the token without looking further."""
    return marker in seen[max(0, len(seen) - len(marker) + 1):] + data


def text_after(seen: bytes, marker: bytes, reasoning: tuple[bytes, bytes] | None = None,
               code_blocks: bool = False) -> bytes | None:
    """What `seen` holds after its first `marker` outside an unclosed `reasoning` block (a marker there is
    thought, not written), or None when there is none yet (the constraints' wait for their start). With
    `code_blocks` (a call's marker), a marker inside a fenced code block opened after prose in the text
    after the reasoning is skipped too: the readers take it as text (code_fences.in_code_block)."""
    at = seen.find(marker)
    while at >= 0 and (_in_reasoning(seen, at, reasoning) or (code_blocks and _in_code(seen, at, reasoning))):
        at = seen.find(marker, at + 1)
    return None if at < 0 else seen[at + len(marker):]


def _in_reasoning(seen: bytes, at: int, reasoning: tuple[bytes, bytes] | None) -> bool:
    return reasoning is not None and seen.rfind(reasoning[0], 0, at) > seen.rfind(reasoning[1], 0, at)


def _in_code(seen: bytes, at: int, reasoning: tuple[bytes, bytes] | None) -> bool:
    start = 0
    if reasoning is not None and (end := seen.rfind(reasoning[1], 0, at)) >= 0:
        start = end + len(reasoning[1])              # the content: after the reasoning
    return in_code_block(seen[start:at].decode("utf-8", "replace"))


def bytes_through(step: Any, state: Any, data: bytes) -> Any:
    """The state after `data` byte by byte through `step` (a constraint's memoized automaton step), or None
    as soon as a byte is refused."""
    for b in data:
        state = step(state, b)
        if state is None:
            return None
    return state


def unheld_mask(vocab: Vocabulary, after: bytes | None, active: bool, allows: Any) -> np.ndarray | None:
    """A constraint's mask while it holds nothing: waiting for `after` (waiting_mask: free, but for tokens
    that write it and more), or done (every token); None while it holds the answer."""
    if after is not None:
        return waiting_mask(vocab, after, allows)
    return None if active else np.ones(vocab.n, dtype=bool)


def best_in_mask(mask: np.ndarray, logits: Any) -> int | None:
    """The allowed token (`mask`) of the highest logit, the lowest id on a tie; None when none is allowed: a
    constraint's best_allowed where its mask is cheap to make whole."""
    if not mask.any():
        return None
    return int(np.argmax(np.where(mask, np.asarray(logits, dtype=np.float32), np.float32(-np.inf))))


# printable bytes first: a state that takes two of them is known not to be forced after a few steps
_SCAN_ORDER = bytes(range(0x20, 0x7F)) + bytes(range(0x20)) + bytes(range(0x7F, 0x100))


def _only_next(step: Any, state: Any, candidates: Iterable[int] | None = None) -> tuple[int, Any] | None:
    """(byte, state after it) when exactly one byte may come next in `state`, else None. `candidates`: a
    superset of the bytes `state` takes (the automaton's hint); None: all 256 are tried."""
    only = None
    for b in _SCAN_ORDER if candidates is None else candidates:
        nxt = step(state, b)
        if nxt is not None:
            if only is not None:
                return None
            only = (b, nxt)
    return only


def forced_run(step: Any, state: Any, may_end: Any, memo: dict, limit: int = 256, next_bytes: Any = None) -> bytes:
    """The bytes every continuation of `state` writes next through `step` (a constraint's memoized automaton
    step): they stop where two bytes could come, where the held text may end (`may_end(state)`), or at
    `limit`. A key the schema names, a call's fixed markup, the one tool's name. `memo` keeps each state's
    run (a state on a run is asked again once the tokens before it are written). `next_bytes(state)`: a
    superset of the bytes the state takes, or None (json_next_bytes.py): only those are tried, not 256."""
    out, states = b"", []
    while state not in memo:
        if len(out) >= limit:
            break
        if may_end(state):
            only = None
        else:
            only = _only_next(step, state, None if next_bytes is None else next_bytes(state))
        if only is None:
            memo[state] = b""
            break
        states.append(state)
        out += bytes([only[0]])
        state = only[1]
    out += memo.get(state, b"")
    if len(memo) > 20_000:
        memo.clear()
    for i, s in enumerate(states):
        memo[s] = out[i:]
    return out
