"""The disk restore as the cache runs it: the validation pass and the apply pass, overlapped.

What this is: `restore_mapped` checks the engine header (model, token ids) before anything is
applied, then runs the validation pass (CRC32 of every sidecar piece) on a helper thread while the
apply pass feeds the engine's restorer behind it: a piece is applied only once the validation pass
has checked every byte of it, and the call returns only after the validation pass has covered all
the bytes it needs. So nothing unchecked is ever applied, as with two passes one after the other,
at the cost of about one pass (the native CRC32 and the engine's checked chunk writes release the
GIL; the CRC runs at memory speed, so the validation pass costs about the read of the mapped bytes).
On damage: with the restore ladder, the rest is still fed and the engine's own per-chunk CRC stops
at the first bad chunk (its longest valid prefix); without it, the context is emptied. The image is one read-only
memory map: never copied into the process, never held twice; its bytes are read only natively, under
a SIGBUS guard (crc32, read_mapped, kv_write_checked), so a file another program truncates under the
map is damage (MappedReadFault: "the file was cut short while read"), never a crash. What this is not:
placement or the decision to discard (restoring.py); `restore.validate_image` / `apply_image` are the same two passes run
one after the other (kept for the benchmark's breakdown).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
from strata._engine import (
    MappedReadFault,  # a guarded read met a page truncated away (not SIGBUS)
    crc32,  # zlib.crc32 bit for bit, native: > 10 GB/s, no GIL on big buffers
)

from .restore import Validation, _read_header, aligned_sizes, check_held, needed_bytes


def _clip(sizes: list[int], total: int) -> list[int]:
    out, pos = [], 0
    for size in sizes:
        if pos >= total:
            break
        out.append(min(size, total - pos))
        pos += out[-1]
    return out


def restore_mapped(engine, ctx: int, view: memoryview, tokens: np.ndarray, model_id: str, image_bytes: int,
                   piece_bytes: int, piece_crc32: tuple[int, ...], image_format, limit_tokens: int,
                   ladder: bool, stop: Callable[[], bool] | None = None) -> tuple[int, Validation, str]:
    """Restore at most `limit_tokens` of the image in `view` into `ctx`. With `stop`, asked after each piece
    (up to 16 MiB): true ends the restore there, keeping the whole chunks applied (the server is stopping:
    a 12 GiB history read on for ~37 s while the stop said nothing).

    Returns (tokens restored, the validation's verdict, reason).
    """
    if len(view) == 0:
        return 0, Validation(0, False, "empty image"), "empty image"
    try:
        header = _read_header(image_format, view)
    except Exception as exc:  # the engine's parser raises ValueError; any failure: untrusted
        v = Validation(0, False, f"header unreadable: {exc}")
        return 0, v, v.reason
    if str(header.model_id) != model_id:
        v = Validation(0, False, "image of another model")
        return 0, v, v.reason
    head_tokens = np.asarray(header.tokens, dtype=np.int32)
    if head_tokens.shape != tokens.shape or not np.array_equal(head_tokens, tokens):
        v = Validation(0, False, "image tokens differ from its sidecar")
        return 0, v, v.reason
    if len(view) != image_bytes:  # cut short or grown since start-up: said first, the piece it breaks after
        damage = f"image is {len(view)} bytes, the sidecar says {image_bytes}: truncated or grown"
    else:
        damage = None
    covered = min(len(view), needed_bytes(header, limit_tokens, image_bytes))
    sizes = aligned_sizes(header, len(view)) or [piece_bytes] * -(-len(view) // piece_bytes)
    sizes = _clip(sizes, covered)  # covered ends on a chunk boundary: the clipped pieces hold whole chunks

    cond = threading.Condition()
    state = {"upto": 0, "bad": None, "stop": False, "cut": None}

    def validation_pass() -> None:
        pos, i = 0, 0
        while pos < covered:
            piece = view[pos:pos + piece_bytes]
            try:
                ok = i < len(piece_crc32) and crc32(piece) == piece_crc32[i]
            except MappedReadFault:  # the file was truncated under the map: damage, not SIGBUS
                ok = False
                state["cut"] = f"piece {i}"
            with cond:
                if ok:
                    state["upto"] = pos + len(piece)
                else:
                    state["bad"] = i
                cond.notify_all()
                if not ok or state["stop"]:
                    return
            pos += len(piece)
            i += 1

    checker = threading.Thread(target=validation_pass, name="strata-cache-validate", daemon=True)
    checker.start()
    n = 0
    why = "restored"
    cut = None  # where the apply pass found the file cut short
    stopped = False  # ended early by `stop`
    try:
        restorer = engine.restorer(ctx)
        pos = 0
        for size in sizes:
            if pos >= covered:
                break
            end = min(pos + size, len(view))
            with cond:
                while state["upto"] < end and state["bad"] is None:
                    cond.wait()
                unchecked = state["upto"] < end
            if unchecked and not ladder:
                break
            try:
                restorer.feed(view[pos:end])
            except MappedReadFault:  # truncated under the map: the chunks written before it stay
                cut = f"byte {pos}"
                break
            pos = end
            if getattr(restorer, "n_restored", 0) >= limit_tokens:
                break
            if stop is not None and pos < covered and stop():
                stopped = True
                break
        n = int(getattr(restorer, "n_restored", 0)) if cut else int(restorer.finish())
    except Exception as exc:  # a damaged stream or an I/O error: the context is not trusted
        n, why = -1, f"restore failed: {exc}"
    finally:
        with cond:
            state["stop"] = True
        checker.join()
    if state["cut"] is not None or cut is not None:  # one reason: both passes see the same cut
        bad = f"the file was cut short while read (at {state['cut'] or cut})"
        damage = bad if damage is None else f"{damage}; {bad}"
    elif state["bad"] is not None:
        bad = f"piece {state['bad']} fails its checksum"
        damage = bad if damage is None else f"{damage}; {bad}"
    if damage is not None and not ladder:
        n = -1
        why = f"damaged, not restored: {damage}"
    if n < 0:
        try:
            engine.truncate(ctx, 0)
        except Exception:
            pass
        return 0, Validation(0, False, damage or why), why
    n, held_why = check_held(engine, ctx, min(n, limit_tokens, int(tokens.shape[0])), tokens)
    if damage is not None:
        return n, Validation(n, False, damage), f"restore ladder: {n} of {tokens.shape[0]} tokens ({damage})"
    if stopped and held_why == "restored":
        held_why = f"stopped after {n} of {tokens.shape[0]} tokens: the server is stopping"
    return n, Validation(int(tokens.shape[0]), True, "valid"), held_why
