"""What the held-answer constraints (json_constraint.py, forced_start.py, keyed_call.py) know of tokens:
`Vocabulary`, each token's bytes, which are special (never free text), the tokens by first byte; and
`text_after`, the wait for a marker (a closing reasoning tag, a call's opening) outside a reasoning block.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


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

    @classmethod
    def of(cls, tokenizer: Any) -> Vocabulary:
        """The vocabulary of a strata Tokenizer (built once per tokenizer)."""
        cached = getattr(tokenizer, "_json_vocabulary", None)
        if cached is None:
            cached = cls([tokenizer.token_bytes(i) for i in range(tokenizer.n_vocab)], tokenizer.special_ids)
            tokenizer._json_vocabulary = cached
        return cached


def text_after(seen: bytes, marker: bytes, reasoning: tuple[bytes, bytes] | None = None) -> bytes | None:
    """What `seen` holds after its first `marker` outside an unclosed `reasoning` block (a marker there is
    thought, not written), or None when there is none yet (the constraints' wait for their start)."""
    at = seen.find(marker)
    while at >= 0 and reasoning is not None and seen.rfind(reasoning[0], 0, at) > seen.rfind(reasoning[1], 0, at):
        at = seen.find(marker, at + 1)
    return None if at < 0 else seen[at + len(marker):]
