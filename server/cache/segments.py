"""Content-addressed segments of a conversation, anchored at message openers.

What this is: the pure part of the segment tier and the system-prompt cache: where the anchors of
a token history are (each message opener such as `<|im_start|>` for ChatML, never the role token
after it; a vocabulary may have several, GLM's <|user|> / <|assistant|> / ...), the hash chain that keys the state of all tokens before each anchor (so two
conversations that share a system prompt and tool list reach the same key, and the same file), and
which anchors a park should save. What this is not: storage. A segment's file holds the engine
state of every token before its anchor (the engine snapshots prefixes, not ranges), kept in a
DiskLevel of its own folder and budget by cache.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# A park writes at most this many new segment files, synchronously (each is a snapshot of a prefix,
# so each costs a write of that prefix's state); the shallowest missing anchors first: they are the
# cheapest and the most shared (system prompt, tools, first messages), and a conversation parked
# turn after turn fills in its deeper anchors as it grows.
MAX_NEW_SEGMENTS_PER_PARK = 2


# An anchor leaves at least this many tokens before it: fewer are a BOS and an opener, no message yet
# (Llama 3's <|begin_of_text|><|start_header_id|>, GLM's [gMASK]<sop><|system|>, Mistral's <s>[INST]),
# and the first anchor is the system-prompt cache's prefix.
MIN_ANCHOR_TOKENS = 4


def anchor_positions(tokens: Sequence[int] | np.ndarray, openers: Sequence[int]) -> list[int]:
    """Positions >= MIN_ANCHOR_TOKENS holding one of the `openers` (each a token that opens a chat
    message: a message boundary)."""
    toks = np.asarray(tokens, dtype=np.int64)
    if not len(openers) or toks.shape[0] <= MIN_ANCHOR_TOKENS:
        return []
    hits = np.flatnonzero(np.isin(toks[MIN_ANCHOR_TOKENS:], np.asarray(list(openers), dtype=np.int64)))
    return [int(p) + MIN_ANCHOR_TOKENS for p in hits.tolist()]


def chain_keys(identity_tag: str, tokens: Sequence[int] | np.ndarray, anchors: Sequence[int]) -> list[str]:
    """key[i] = H(key[i-1] || tokens[anchor[i-1]:anchor[i]]): the state of tokens[:anchor[i]]."""
    toks = np.asarray(tokens, dtype=np.int32)
    prev = hashlib.blake2b(identity_tag.encode(), digest_size=16).digest()
    start = 0
    keys = []
    for a in anchors:
        h = hashlib.blake2b(prev, digest_size=16)
        h.update(toks[start:a].tobytes())
        prev = h.digest()
        keys.append(prev.hex())
        start = a
    return keys


@dataclass(frozen=True)
class SegmentPlan:
    saves: tuple[tuple[int, str], ...]  # (anchor, key), in the order to write them
    reason: str


def plan_segment_saves(anchors: Sequence[int], keys: Sequence[str], present: set[str],
                       max_new: int = MAX_NEW_SEGMENTS_PER_PARK) -> SegmentPlan:
    """Which anchors a park writes: those not stored yet, shallowest first, at most `max_new`."""
    if max_new < 0:
        raise ValueError(f"max_new must be >= 0, got {max_new!r}")
    missing = [(a, k) for a, k in zip(anchors, keys, strict=True) if k not in present]
    chosen = tuple(sorted(missing, key=lambda ak: ak[0])[:max_new])
    return SegmentPlan(chosen, f"{len(missing)} of {len(anchors)} anchors missing, writing {len(chosen)}")


def system_prompt_anchor(anchors: Sequence[int]) -> int | None:
    """The end of the first message (system prompt plus tools): the first anchor."""
    return anchors[0] if anchors else None
