"""Snapshot images of a context's KV: the versioned byte format, writing, validating and streaming restore.

What it is: the image a context is saved as (RAM cache, disk cache, sessions):

    header  magic b"STRATAKV" | u32 version | u32 header_size | 32 B model_id (SHA-256 of the GGUF header)
            | u32 kv_type_id (0 f32, 1 f16, 8 q8_0) | u32 n_layer | u32 kv_dim | u32 row_bytes
            | u64 bytes_per_token | u32 chunk_tokens | u64 n_tokens | n_tokens x u32 token ids
            | u32 CRC32 of all the header bytes before it
    chunks  ceil(n_tokens / chunk_tokens) chunks; chunk i holds tokens [i*chunk_tokens, ...) as
            every layer's K rows then V rows for those tokens (Engine.kv_read's layout; K rows alone
            where the values are the keys, deepseek2's latent: bytes_per_token n_layer x row_bytes),
            then a u32 CRC32 of those bytes

All integers little-endian. Chunks are token-major, so any prefix of whole valid chunks is itself a
restorable state: `restore` returns the longest valid prefix (the restore ladder). A damaged header,
another model's image or another KV layout's is refused with SnapshotError naming the mismatch.
What it is not: where images are kept (server/cache), or the KV arithmetic (native engine).
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from strata._engine import (
    crc32,  # zlib.crc32 bit for bit, native, no GIL on big buffers
    read_mapped,  # bytes(view), guarded: a truncated map raises MappedReadFault
)

MAGIC = b"STRATAKV"
VERSION = 1
# What the KV bytes of a model's tokens are, as this engine computes them: raise it with any change that makes
# them differ for some model (RoPE, norms, expert routing, a scratch fix), so that the conversation cache stops
# restoring states an older engine computed (disk sidecars record it: server/cache/disk.py). 1: every engine
# before it was recorded is older (its fixes of 11-30 .. 12-02 changed the KV of llama's scaled RoPE, glm4moe,
# deepseek2).
KV_REVISION = 2
MAX_PIECE_BYTES = 16 << 20  # snapshot_chunks yields pieces of at most this many bytes
MAX_CHUNK_TOKENS = 256  # tokens per chunk, fewer when a chunk would exceed MAX_PIECE_BYTES
KV_TYPE_IDS = {"f32": 0, "f16": 1, "q8_0": 8}
_FIXED = struct.Struct("<8sII32sIIIIQIQ")  # magic .. n_tokens
_MAX_TOKENS = 1 << 24  # no context holds 16M tokens; larger counts mean a damaged header


class SnapshotError(ValueError):
    """A snapshot image that cannot be used (damaged header, other model, other layout)."""


@dataclass(frozen=True)
class SnapshotHeader:
    version: int
    header_size: int
    model_id: str
    kv_type: str
    n_layer: int
    kv_dim: int
    row_bytes: int
    bytes_per_token: int
    chunk_tokens: int
    n_tokens: int
    tokens: tuple[int, ...]

    @property
    def n_chunks(self) -> int:
        return -(-self.n_tokens // self.chunk_tokens)

    def chunk_token_count(self, i: int) -> int:
        return min(self.chunk_tokens, self.n_tokens - i * self.chunk_tokens)

    def chunk_bytes(self, i: int) -> int:
        """Bytes of chunk i on disk, its CRC included."""
        return self.chunk_token_count(i) * self.bytes_per_token + 4

    @property
    def image_bytes(self) -> int:
        return self.header_size + sum(self.chunk_bytes(i) for i in range(self.n_chunks))

    def kv_layout(self) -> dict:
        return {"kv_type": self.kv_type, "n_layer": self.n_layer, "kv_dim": self.kv_dim,
                "row_bytes": self.row_bytes, "bytes_per_token": self.bytes_per_token}


def chunk_tokens_for(bytes_per_token: int) -> int:
    return max(1, min(MAX_CHUNK_TOKENS, (MAX_PIECE_BYTES - 4) // max(1, bytes_per_token)))


def header_size_needed(first_bytes: bytes) -> int:
    """Total header size, given at least the fixed part (_FIXED.size bytes) of an image; checks the
    fixed part first (magic, version, token count) so a damaged one is refused before reading more."""
    if len(first_bytes) < _FIXED.size:
        raise SnapshotError(f"snapshot header truncated: {len(first_bytes)} bytes, the fixed part alone is "
                            f"{_FIXED.size}")
    magic, version, header_size, *_, n_tokens = _FIXED.unpack_from(first_bytes)
    if magic != MAGIC:
        raise SnapshotError("not a Strata snapshot (bad magic)")
    if version != VERSION:
        raise SnapshotError(f"snapshot version {version} is not supported (this build reads {VERSION})")
    if n_tokens > _MAX_TOKENS:
        raise SnapshotError(f"snapshot header damaged: absurd token count {n_tokens}")
    if header_size != _FIXED.size + 4 * n_tokens + 4:
        raise SnapshotError(f"snapshot header damaged: size {header_size} does not fit {n_tokens} tokens")
    return header_size


def encode_header(model_id: str, layout: dict, tokens: list[int]) -> bytes:
    bpt = layout["bytes_per_token"]
    fixed = _FIXED.pack(MAGIC, VERSION, _FIXED.size + 4 * len(tokens) + 4, bytes.fromhex(model_id),
                        KV_TYPE_IDS[layout["kv_type"]], layout["n_layer"], layout["kv_dim"], layout["row_bytes"],
                        bpt, chunk_tokens_for(bpt), len(tokens))
    body = fixed + struct.pack(f"<{len(tokens)}I", *tokens)
    return body + struct.pack("<I", crc32(body))


def read_header(first_bytes: bytes) -> SnapshotHeader:
    """The header at the start of an image; SnapshotError names what is wrong or missing."""
    header_size = header_size_needed(first_bytes)
    data = bytes(first_bytes[:header_size])
    (_, version, _, model_id, kv_id, n_layer, kv_dim, row_bytes, bpt, chunk_tokens,
     n_tokens) = _FIXED.unpack_from(data)
    if len(data) < header_size:
        raise SnapshotError(f"snapshot header truncated: {len(data)} of {header_size} bytes")
    (crc,) = struct.unpack_from("<I", data, header_size - 4)
    if crc32(data[: header_size - 4]) != crc:
        raise SnapshotError("snapshot header damaged: CRC mismatch")
    kv_types = {v: k for k, v in KV_TYPE_IDS.items()}
    if kv_id not in kv_types:
        raise SnapshotError(f"snapshot has unknown KV type id {kv_id}")
    if chunk_tokens < 1 or bpt not in (2 * n_layer * row_bytes, n_layer * row_bytes):   # K and V, or K read as both
        raise SnapshotError("snapshot header damaged: inconsistent KV layout")
    tokens = struct.unpack_from(f"<{n_tokens}I", data, _FIXED.size)
    return SnapshotHeader(version, header_size, model_id.hex(), kv_types[kv_id], n_layer, kv_dim, row_bytes, bpt,
                          chunk_tokens, n_tokens, tuple(tokens))


def check_compatible(header: SnapshotHeader, model_id: str, layout: dict) -> None:
    if header.model_id != model_id:
        raise SnapshotError(f"snapshot is of another model ({header.model_id[:12]}..., this engine runs "
                            f"{model_id[:12]}...)")
    if header.kv_layout() != layout:
        raise SnapshotError(f"snapshot KV layout {header.kv_layout()} differs from this engine's {layout}")


def write_chunks(engine, ctx: int, n: int | None = None) -> Iterator[bytes]:
    """The image of ctx's first n tokens (all when None) as pieces of <= MAX_PIECE_BYTES."""
    tokens = engine.context_tokens(ctx)
    n = len(tokens) if n is None else n
    if not 0 <= n <= len(tokens):
        raise ValueError(f"snapshot: context {ctx} holds {len(tokens)} tokens, cannot snapshot {n}")
    layout = engine.kv_layout()
    header = encode_header(engine.model_id, layout, tokens[:n])
    ct = chunk_tokens_for(layout["bytes_per_token"])

    def pieces() -> Iterator[bytes]:
        yield header
        for t0 in range(0, n, ct):
            kv = engine.kv_read(ctx, t0, min(n, t0 + ct))
            yield kv + struct.pack("<I", crc32(kv))

    return pieces()


def _same(view: memoryview) -> memoryview:
    return view


class _ChunkReader:
    """Cuts a stream of pieces into the header and whole chunks, holding at most one chunk."""

    def __init__(self) -> None:
        self.header: SnapshotHeader | None = None
        self._buf = bytearray()
        self._chunk = 0
        self.done = False  # all chunks seen, or a bad chunk ended the valid prefix

    def feed(self, data, check: bool = True) -> Iterator[tuple[int, memoryview, int]]:
        """Yields (chunk index, chunk KV bytes, its stored CRC) for each whole chunk, the header as
        index -1; with check, only chunks whose CRC matches (the first bad one ends the stream). Without
        check the caller verifies each chunk and calls `stop()` at the first bad one."""
        view = memoryview(data).cast("B")
        # a memory map's pages are read only natively, guarded: a file truncated under the map is an
        # OSError (strata._engine.MappedReadFault), not SIGBUS; the KV itself goes to crc32 / kv_write_checked
        take_bytes = read_mapped if isinstance(view.obj, mmap.mmap) else _same
        while len(view) and not self.done:
            if self.header is None:
                have = len(self._buf)
                need = _FIXED.size if have < _FIXED.size else header_size_needed(bytes(self._buf[: _FIXED.size]))
                take = min(len(view), need - have)
                self._buf += take_bytes(view[:take])
                view = view[take:]
                if len(self._buf) == need and need > _FIXED.size:
                    self.header = read_header(bytes(self._buf))
                    self._buf = bytearray()
                    self.done = self.header.n_chunks == 0
                    yield -1, memoryview(b""), 0
                continue
            size = self.header.chunk_bytes(self._chunk)
            if not self._buf and len(view) >= size:
                chunk, view = view[:size], view[size:]
            else:
                take = min(len(view), size - len(self._buf))
                self._buf += take_bytes(view[:take])
                view = view[take:]
                if len(self._buf) < size:
                    continue
                chunk, self._buf = memoryview(bytes(self._buf)), bytearray()
            (crc,) = struct.unpack("<I", take_bytes(chunk[size - 4 :]))
            kv = chunk[: size - 4]
            if check and crc32(kv) != crc:
                self.done = True
                return
            yield self._chunk, kv, crc
            if self.done:  # stop() during the yield: a bad chunk
                return
            self._chunk += 1
            self.done = self._chunk == self.header.n_chunks

    def stop(self) -> None:
        self.done = True


class Restorer:
    """Streams an image into an engine context: feed(pieces of any size), then finish().

    The context is emptied once the header is read and checked; each chunk is checked and written as
    it completes (`Engine.kv_write_checked`: CRC and copy in one native call). An image longer than
    the context restores its longest prefix of whole chunks that fits (SnapshotError when not even
    one chunk fits). finish() returns the tokens restored (the longest valid prefix of whole chunks).
    """

    def __init__(self, engine, ctx: int) -> None:
        self.engine = engine
        self.ctx = ctx
        self.n_restored = 0
        self._reader = _ChunkReader()
        self._finished = False
        self._max_chunks = 0  # chunks that fit the context, set from the header

    def feed(self, data) -> None:
        if self._finished:
            raise ValueError("restorer: feed() after finish()")
        reader = self._reader
        for index, kv, crc in reader.feed(data, check=False):
            h = reader.header
            if index < 0:
                check_compatible(h, self.engine.model_id, self.engine.kv_layout())
                capacity = self.engine.context_capacity(self.ctx)
                self._max_chunks = h.n_chunks if h.n_tokens <= capacity else capacity // h.chunk_tokens
                if self._max_chunks == 0 and h.n_chunks:
                    raise SnapshotError(f"snapshot holds {h.n_tokens} tokens in chunks of {h.chunk_tokens}, context "
                                        f"{self.ctx} has capacity {capacity}: not even one chunk fits")
                self.engine.truncate(self.ctx, 0)
                continue
            if index >= self._max_chunks:
                reader.stop()  # the context is full: the prefix that fits is restored
                return
            t0 = index * h.chunk_tokens
            n = h.chunk_token_count(index)
            if not _write_checked(self.engine, self.ctx, h.tokens[t0 : t0 + n], kv, crc):
                reader.stop()
                return
            self.n_restored = t0 + n

    def finish(self) -> int:
        self._finished = True
        if self._reader.header is None:
            raise SnapshotError("snapshot header truncated: the image ended before its header was complete")
        return self.n_restored


def _write_checked(engine, ctx: int, tokens, kv, crc: int) -> bool:
    write = getattr(engine, "kv_write_checked", None)
    if write is not None:
        return write(ctx, tokens, kv, crc)
    if crc32(kv) != crc:  # an engine without the native call
        return False
    engine.kv_write(ctx, tokens, kv)
    return True


def validate(chunks: Iterable[bytes]) -> int:
    """Tokens in the longest valid prefix of an image given as pieces; SnapshotError for a bad header."""
    reader = _ChunkReader()
    n = 0
    for piece in chunks:
        for index, _, _ in reader.feed(piece):
            if index >= 0:
                n = index * reader.header.chunk_tokens + reader.header.chunk_token_count(index)
        if reader.done:
            break
    if reader.header is None:
        raise SnapshotError("snapshot header truncated: the image ended before its header was complete")
    return n
