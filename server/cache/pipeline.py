"""The disk restore as the cache runs it: the validation pass and the apply pass, overlapped.

What this is: `restore_file` checks the engine header (model, token ids) before anything is
applied, then runs the validation pass on a helper thread (each sidecar piece read from the file
into one buffer, then its CRC32 checked) while the apply pass feeds the engine's restorer behind it:
a piece is applied only once the validation pass has read and checked every byte of it, and the call
returns only after the validation pass has covered all the bytes it needs. So nothing unchecked is
ever applied, as with two passes one after the other, at the cost of about one pass (the reads, the
native CRC32 and the engine's checked chunk writes release the GIL).
On damage: with the restore ladder, the rest is still fed and the engine's own per-chunk CRC stops
at the first bad chunk (its longest valid prefix); without it, the context is emptied.
The image is read with readinto() into a few reused buffers (one apply piece and one checksum piece
ahead of the apply pass: 32 MiB by default), never memory-mapped: a file another process truncates while it is read gives a short
read, found and counted as damage, where a map's missing pages killed the process with SIGBUS. What this is not: placement or the decision to discard (restoring.py);
`restore.validate_image` / `apply_image` are the same two passes run one after the other (kept for
the benchmark's breakdown).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np
from strata._engine import crc32  # zlib.crc32 bit for bit, native: > 10 GB/s, no GIL on big buffers

from .restore import Validation, _read_header, aligned_sizes, check_held, needed_bytes


def _clip(sizes: list[int], total: int) -> list[int]:
    out, pos = [], 0
    for size in sizes:
        if pos >= total:
            break
        out.append(min(size, total - pos))
        pos += out[-1]
    return out


HEADER_PROBE_BYTES = 1 << 20  # the header is parsed from the first MiB (16 MiB when longer: restore._read_header)
READ_BYTES = 1 << 20  # one read, checksummed at once while its bytes are still in the CPU's cache


@dataclass
class _Piece:
    offset: int
    size: int
    buf: bytearray
    got: int  # bytes read: less than size where the file ended or the validation pass stopped
    ended: bool = False  # the file ended in it


def _read_into(f, view: memoryview) -> int:
    """Bytes read into `view`: fewer only where the file ends."""
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    return got


class _ReadAhead:
    """The validation pass on its own thread: reads the image front to back in the apply pass's pieces
    (and on to the end of the last sidecar piece they touch), checks each sidecar piece's CRC32 as its
    bytes come in, and hands the apply pass the pieces it read with how far the checks got. It stays at
    most `window` bytes ahead, and buffers the apply pass gives back are used again: one buffer of the
    whole image cost its first-touch page faults, which made a 2 GiB restore two to three times slower.
    A read that comes back short (the file was truncated since it was opened) ends the pass: `cut_at`
    says where. Any other failure ends it too, as a bad piece: nothing past it counts as checked."""

    def __init__(self, f, reads: list[tuple[int, bool]], length: int, piece_bytes: int,
                 piece_crc32: tuple[int, ...], window: int) -> None:
        self.f, self.reads, self.length = f, reads, length
        self.piece_bytes, self.piece_crc32, self.window = piece_bytes, piece_crc32, window
        self.cond = threading.Condition()
        self.pending: deque[_Piece] = deque()  # read, not yet taken by the apply pass
        self.held = 0
        self.upto = 0  # bytes read and checked
        self.bad: int | None = None  # the first sidecar piece that fails (or was cut short)
        self.cut_at: int | None = None
        self.error: Exception | None = None
        self.finished = False  # the pass returned (all read, a bad piece, or stopped)
        self.stop = False
        self._free: list[bytearray] = []
        self._thread = threading.Thread(target=self._run, name="strata-cache-validate", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def buffer(self, size: int) -> bytearray:
        with self.cond:
            for i, b in enumerate(self._free):
                if len(b) >= size:
                    return self._free.pop(i)
        return bytearray(size)

    def give_back(self, piece: _Piece, held: bool = True) -> None:
        with self.cond:
            self.held -= piece.size if held else 0
            self._free.append(piece.buf)
            self.cond.notify_all()

    def _run(self) -> None:
        crc, index, start = 0, 0, 0  # the running CRC of sidecar piece `index`, which starts at `start`
        pos = 0
        try:
            for size, feed in self.reads:
                with self.cond:
                    while self.held >= self.window and not self.stop:
                        self.cond.wait()
                    if self.stop:
                        return
                buf = self.buffer(size)
                view = memoryview(buf)[:size]
                offset, got, bad, upto, ended = pos, 0, None, None, False
                while got < size and bad is None:
                    want = min(READ_BYTES, size - got)
                    try:
                        n = _read_into(self.f, view[got:got + want])
                    except OSError as exc:  # an I/O error: nothing from here on is trusted
                        n, self.error = 0, exc
                    data = view[got:got + n]  # checked while it is still in the CPU's cache
                    got += n
                    while len(data) and bad is None:
                        end = min(start + self.piece_bytes, self.length)
                        take = min(len(data), end - pos)
                        crc = crc32(data[:take], crc)
                        data = data[take:]
                        pos += take
                        if pos == end:
                            if index < len(self.piece_crc32) and crc == self.piece_crc32[index]:
                                upto = end
                            else:
                                bad = index
                            crc, index, start = 0, index + 1, end
                    if n < want:
                        ended = self.error is None
                        break
                if got < size and bad is None:
                    bad = index  # the piece it is in was cut short
                with self.cond:
                    if ended:
                        self.cut_at = offset + got
                    if upto is not None:
                        self.upto = upto
                    if feed:
                        self.pending.append(_Piece(offset, size, buf, got, ended))
                        self.held += size
                    else:
                        self._free.append(buf)
                    if bad is not None:
                        self.bad = bad
                    self.cond.notify_all()
                if bad is not None:
                    return
        except Exception as exc:  # a bug, not damage: the pass ends as at a bad piece, never as if it had checked it all
            with self.cond:
                self.error, self.bad = exc, index
        finally:
            with self.cond:
                self.finished = True
                self.cond.notify_all()


def _header_of(f, length: int, image_format):
    """The engine header from the first MiB of the file (16 MiB when longer); raises as _read_header."""
    head = bytearray(min(length, HEADER_PROBE_BYTES))
    got = _read_into(f, memoryview(head))
    try:
        return _read_header(image_format, memoryview(head)[:got])
    except Exception:
        if got < HEADER_PROBE_BYTES:
            raise
        more = bytearray(min(length, 16 << 20) - got)
        extra = _read_into(f, memoryview(more))
        return _read_header(image_format, bytes(head) + bytes(more[:extra]))


def restore_file(engine, ctx: int, f, tokens: np.ndarray, model_id: str, image_bytes: int,
                 piece_bytes: int, piece_crc32: tuple[int, ...], image_format, limit_tokens: int,
                 ladder: bool) -> tuple[int, Validation, str]:
    """Restore at most `limit_tokens` of the image in the open file `f` (unbuffered, at its start)
    into `ctx`.

    Returns (tokens restored, the validation's verdict, reason).
    """
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        return 0, Validation(0, False, "empty image"), "empty image"
    length = min(size, image_bytes)  # the bytes the sidecar's checksums can speak for
    if hasattr(os, "posix_fadvise"):  # read front to back: a larger read-ahead from the device, as a map had
        with contextlib.suppress(OSError):
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
    try:
        header = _header_of(f, length, image_format)
        f.seek(0)
    except OSError as exc:
        v = Validation(0, False, f"read failed: {exc}")
        return 0, v, v.reason
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
    if size != image_bytes:  # cut short or grown since start-up: said first, the piece it breaks after
        damage = f"image is {size} bytes, the sidecar says {image_bytes}: truncated or grown"
    else:
        damage = None
    covered = min(length, needed_bytes(header, limit_tokens, image_bytes))
    sizes = aligned_sizes(header, size) or [piece_bytes] * -(-size // piece_bytes)
    sizes = _clip(sizes, covered)  # covered ends on a chunk boundary: the clipped pieces hold whole chunks
    checked_to = min(length, -(-covered // piece_bytes) * piece_bytes)  # the end of the last sidecar piece
    reads = [(n, True) for n in sizes] + [(n, False) for n in _clip([piece_bytes] * -(-(checked_to - covered)
                                                                                     // piece_bytes),
                                                                    checked_to - covered)]
    # the least that never waits on bytes it must check first (the apply pass's next piece and the rest of
    # the checksum piece it ends in): 32 MiB by default, so what it reads is still in the CPU's cache when applied
    window = max(sizes, default=0) + piece_bytes

    n = 0
    why = "restored"
    ahead = _ReadAhead(f, reads, length, piece_bytes, piece_crc32, window)
    try:
        restorer = engine.restorer(ctx)
        ahead.start()
        pos = 0
        for size_i in sizes:
            end = pos + size_i
            with ahead.cond:
                while not (ahead.pending and ahead.upto >= end) and ahead.bad is None and not ahead.finished:
                    ahead.cond.wait()
                piece = ahead.pending.popleft() if ahead.pending else None
                checked = piece is not None and ahead.upto >= end
            held = piece is not None
            if not checked:
                if not ladder:
                    if piece is not None:
                        ahead.give_back(piece)
                    break
                # the validation pass stopped at a bad piece: the rest is read here and judged by the
                # engine's per-chunk CRC; a file cut short ends where the read ends
                if piece is None:
                    buf = ahead.buffer(size_i)
                    got = _read_into(f, memoryview(buf)[:size_i])
                    piece = _Piece(pos, size_i, buf, got, got < size_i)
                elif piece.got < piece.size and not piece.ended:   # the pass stopped inside it
                    piece.got += _read_into(f, memoryview(piece.buf)[piece.got:piece.size])
            restorer.feed(memoryview(piece.buf)[:piece.got])
            ahead.give_back(piece, held)
            pos = end
            if piece.got < piece.size or getattr(restorer, "n_restored", 0) >= limit_tokens:
                break
        n = int(restorer.finish())
    except Exception as exc:  # a damaged stream or an I/O error: the context is not trusted
        n, why = -1, f"restore failed: {exc}"
    finally:
        ahead.close()
    if ahead.bad is not None:
        if ahead.error is not None:
            bad = f"read failed at piece {ahead.bad}: {ahead.error}"
        elif ahead.cut_at is not None:
            bad = f"the file was cut short while read ({ahead.cut_at} of {image_bytes} bytes)"
        else:
            bad = f"piece {ahead.bad} fails its checksum"
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
    return n, Validation(int(tokens.shape[0]), True, "valid"), held_why
