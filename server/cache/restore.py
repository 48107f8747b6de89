"""Streamed restore: a validation pass over an image, then an apply pass into an engine context.

What this is: `validate_image` reads the pieces once, checks the sidecar's per-piece CRC32, the
engine header (model and token ids) and asks the engine's snapshot module for the valid prefix;
`apply_image` feeds the pieces (<= 16 MiB each) to `engine.restorer(ctx)` and checks what the
context then holds against the tokens the entry claims. An image is never held twice in RAM: a
disk image is read piece by piece in each pass. What this is not: placement (policy.place_disk_io)
or the decision to discard (cache.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Validation:
    valid_tokens: int  # the longest prefix the image can restore
    complete: bool  # every piece checks, the header matches, every token is valid
    reason: str


def validate_image(pieces: Iterable[bytes], tokens: np.ndarray, model_id: str, image_bytes: int,
                   piece_crc32: tuple[int, ...] | None, image_format) -> Validation:
    """The validation pass. `image_format` offers `read_header(first_bytes)` and `validate(chunks)`."""
    state = {"bad_piece": None, "total": 0, "index": 0}
    it = iter(pieces)
    try:
        first = next(it)
    except StopIteration:
        return Validation(0, False, "empty image")
    except OSError as exc:
        return Validation(0, False, f"unreadable: {exc}")
    try:
        header = image_format.read_header(first)
    except Exception as exc:  # the engine's parser raises ValueError; any failure means untrusted
        return Validation(0, False, f"header unreadable: {exc}")
    if str(header.model_id) != model_id:
        return Validation(0, False, "image of another model")
    head_tokens = np.asarray(list(header.tokens), dtype=np.int32)
    if head_tokens.shape != tokens.shape or not np.array_equal(head_tokens, tokens):
        return Validation(0, False, "image tokens differ from its sidecar")

    def checked() -> Iterator[bytes]:
        for piece in _chain_first(first, it):
            i = state["index"]
            if piece_crc32 is not None and state["bad_piece"] is None:
                if i >= len(piece_crc32) or zlib.crc32(piece) != piece_crc32[i]:
                    state["bad_piece"] = i
            state["index"] = i + 1
            state["total"] += len(piece)
            yield piece

    try:
        valid = int(image_format.validate(checked()))
    except OSError as exc:
        return Validation(0, False, f"read failed: {exc}")
    except Exception as exc:
        return Validation(0, False, f"validation failed: {exc}")
    n = int(tokens.shape[0])
    valid = max(0, min(valid, n))
    if state["bad_piece"] is not None:
        return Validation(valid, False, f"piece {state['bad_piece']} fails its checksum")
    if state["total"] != image_bytes:
        return Validation(valid, False, f"image is {state['total']} bytes, sidecar says {image_bytes}")
    if valid < n:
        return Validation(valid, False, f"engine validates {valid} of {n} tokens")
    return Validation(n, True, "valid")


def _chain_first(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def apply_image(engine, ctx: int, pieces: Iterable[bytes], expect_tokens: np.ndarray,
                limit_tokens: int) -> tuple[int, str]:
    """The apply pass: feed pieces into `engine.restorer(ctx)`, keep at most `limit_tokens`, and
    check the context holds exactly `expect_tokens[:n]`; on any mismatch the context is emptied.

    Returns (tokens restored, reason).
    """
    try:
        restorer = engine.restorer(ctx)
        for piece in pieces:
            restorer.feed(piece)
        n = int(restorer.finish())
    except Exception as exc:  # a damaged stream: the context is not trusted
        _empty(engine, ctx)
        return 0, f"restore failed: {exc}"
    n = min(n, limit_tokens, int(expect_tokens.shape[0]))
    if n < engine.context_len(ctx):
        engine.truncate(ctx, n)
    held = np.asarray(engine.context_tokens(ctx), dtype=np.int32)
    if held.shape[0] != n or not np.array_equal(held, expect_tokens[:n]):
        _empty(engine, ctx)
        return 0, "restored tokens differ from the entry's: context emptied"
    return n, "restored"


def _empty(engine, ctx: int) -> None:
    try:
        engine.truncate(ctx, 0)
    except Exception:
        pass


def timed(fn: Callable[[], tuple[int, str]], clock: Callable[[], float]) -> tuple[int, str, float]:
    t0 = clock()
    n, why = fn()
    return n, why, clock() - t0
