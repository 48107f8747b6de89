"""The two restore passes, one after the other, and the helpers both restore paths share.

What this is: `validate_image` (the validation pass: engine header, then every sidecar piece's CRC32;
the engine's `validate` only to find the ladder prefix when a piece fails), `apply_image` (the apply
pass: pieces fed to `engine.restorer(ctx)`, stopping once enough tokens are in), `check_held` (the
context must hold exactly the entry's first tokens, else it is emptied), `needed_bytes` and
`aligned_sizes` (which bytes hold a prefix; pieces cut at the engine's chunk boundaries). RAM entries
are restored with `apply_image`; disk entries with pipeline.restore_mapped, which overlaps the same
two passes; the benchmark times the passes apart with these. What this is not: placement
(policy.place_disk_io) or the decision to discard (restoring.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from strata._engine import (  # guarded reads of a memory map (no SIGBUS)
    MappedReadFault,
    crc32,  # zlib.crc32 bit for bit, native: > 10 GB/s, no GIL on big buffers
    read_mapped,
)

MAX_PIECE_BYTES = 16 << 20


@dataclass(frozen=True)
class Validation:
    valid_tokens: int  # the longest prefix the image can restore
    complete: bool  # the header matches, every piece checks, every token is valid
    reason: str
    header: object = None


def needed_bytes(header, limit_tokens: int | None, image_bytes: int) -> int:
    """Bytes of the image that hold its first `limit_tokens` (whole chunks); all when unknown."""
    if limit_tokens is None or not all(hasattr(header, a) for a in ("header_size", "chunk_tokens", "chunk_bytes")):
        return image_bytes
    n_chunks = -(-limit_tokens // int(header.chunk_tokens))
    n_chunks = min(n_chunks, int(getattr(header, "n_chunks", n_chunks)))
    return min(image_bytes, int(header.header_size) + sum(int(header.chunk_bytes(i)) for i in range(n_chunks)))


def validate_image(open_pieces: Callable[[], Iterable[bytes]], tokens: np.ndarray, model_id: str,
                   image_bytes: int, piece_crc32: tuple[int, ...], image_format,
                   limit_tokens: int | None = None) -> Validation:
    """The validation pass. `open_pieces()` yields the image in the sidecar's checksum pieces;
    `image_format` offers `read_header(first_bytes)` and `validate(pieces)` (strata.engine.snapshot).
    With `limit_tokens`, only the pieces that hold those tokens are read (a shorter prefix of a long
    history is restored without reading the rest)."""
    total = 0
    bad_piece = None
    header = None
    covered = image_bytes
    try:
        for i, piece in enumerate(open_pieces()):
            if total >= covered:
                break
            if i == 0:
                try:
                    header = _read_header(image_format, piece)
                except Exception as exc:  # the engine's parser raises ValueError; any failure: untrusted
                    return Validation(0, False, f"header unreadable: {exc}")
                if str(header.model_id) != model_id:
                    return Validation(0, False, "image of another model")
                head_tokens = np.asarray(header.tokens, dtype=np.int32)
                if head_tokens.shape != tokens.shape or not np.array_equal(head_tokens, tokens):
                    return Validation(0, False, "image tokens differ from its sidecar")
                covered = needed_bytes(header, limit_tokens, image_bytes)
            if i >= len(piece_crc32) or crc32(piece) != piece_crc32[i]:
                bad_piece = i
                break
            total += len(piece)
    except OSError as exc:
        return Validation(0, False, f"read failed: {exc}")
    if header is None:
        return Validation(0, False, "empty image")
    n = int(tokens.shape[0])
    if bad_piece is None and (total == image_bytes or (covered < image_bytes and total >= covered)):
        return Validation(n, True, "valid" if covered == image_bytes else f"valid up to byte {total}", header)
    why = f"piece {bad_piece} fails its checksum" if bad_piece is not None else (
        f"image is {total} bytes, sidecar says {image_bytes}")
    try:
        valid = int(image_format.validate(open_pieces()))
    except Exception as exc:  # SnapshotError, OSError: nothing of it is usable
        return Validation(0, False, f"{why}; no valid prefix: {exc}", header)
    return Validation(max(0, min(valid, n)), False, why, header)


def _read_header(image_format, data):
    """The header from the start of an image (a piece or the whole mapped image), copying only its
    first MiB, or its first 16 MiB when the header is longer (4M tokens; no context holds more)."""
    try:
        return image_format.read_header(read_mapped(data[: 1 << 20]))
    except MappedReadFault:
        raise
    except Exception:
        if len(data) <= 1 << 20:
            raise
        return image_format.read_header(read_mapped(data[: 16 << 20]))


def aligned_sizes(header, image_bytes: int, max_piece: int = MAX_PIECE_BYTES) -> list[int] | None:
    """Piece sizes that start at the engine's chunk boundaries (header, then whole chunks grouped up
    to `max_piece`), so the engine's restorer takes every chunk without copying it; None when the
    header does not describe its chunks."""
    if not all(hasattr(header, a) for a in ("header_size", "n_chunks", "chunk_bytes")):
        return None
    sizes = [int(header.header_size)]
    group = 0
    for i in range(int(header.n_chunks)):
        c = int(header.chunk_bytes(i))
        if group and group + c > max_piece:
            sizes.append(group)
            group = 0
        group += c
    if group:
        sizes.append(group)
    return sizes if sum(sizes) == image_bytes else None


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
            if getattr(restorer, "n_restored", 0) >= limit_tokens:
                break  # the rest of a longer history is not needed
        n = int(restorer.finish())
    except Exception as exc:  # a damaged stream or an I/O error: the context is not trusted
        _empty(engine, ctx)
        return 0, f"restore failed: {exc}"
    return check_held(engine, ctx, min(n, limit_tokens, int(expect_tokens.shape[0])), expect_tokens)


def check_held(engine, ctx: int, n: int, expect_tokens: np.ndarray) -> tuple[int, str]:
    """Keep `n` tokens in ctx and check they are exactly `expect_tokens[:n]`, else empty it."""
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
