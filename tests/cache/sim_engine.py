"""A small simulated engine for the cache's CPU tests: real snapshot image bytes, no model.

What this is: contexts holding token ids and a per-position "KV" (a hash chain over the tokens and
the model id, `bytes_per_token` bytes a position, 16 KiB by default so 64 tokens make 1 MiB), snapshot images in the engine's layout (header with model id,
KV layout, token ids; then token-chunk-major chunks each with a CRC32, so any prefix of whole
chunks restores: the ladder), a streaming restorer, and greedy "generation" that depends on every
KV byte (so a wrong or foreign restore changes the output). What this is not: the real engine; the
tests in test_engine_equality.py run the same checks on it. The module-level `read_header` and
`validate` mirror `strata.engine.snapshot`.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from dataclasses import dataclass

MAGIC = b"SIMKV001"
CHUNK_TOKENS = 4


@dataclass(frozen=True)
class SimHeader:
    model_id: str
    kv_layout: str
    n_tokens: int
    tokens: list


def _kv(prev: bytes, token: int, model_id: str, bpt: int) -> bytes:
    seed = hashlib.blake2b(prev[:64] + struct.pack("<i", token) + model_id.encode(), digest_size=64).digest()
    return (seed * (bpt // 64 + 1))[:bpt]


def read_header(first: bytes) -> SimHeader:
    if len(first) < 12 or first[:8] != MAGIC:
        raise ValueError("not a snapshot image (bad magic)")
    (hlen,) = struct.unpack("<I", first[8:12])
    if len(first) < 12 + hlen:
        raise ValueError("header incomplete")
    d = json.loads(first[12:12 + hlen])
    return SimHeader(d["model_id"], d["kv_layout"], d["n_tokens"], d["tokens"])


class _Parser:
    """Incremental parser; holds at most one partial chunk."""

    def __init__(self) -> None:
        self.bpt = 0
        self.buf = bytearray()
        self.header: SimHeader | None = None
        self.kv: list[bytes] = []
        self.bad = False

    def feed(self, data: bytes) -> None:
        if self.bad:
            return
        self.buf += data
        if self.header is None:
            if len(self.buf) < 12:
                return
            if bytes(self.buf[:8]) != MAGIC:
                self.bad = True
                return
            (hlen,) = struct.unpack("<I", self.buf[8:12])
            if len(self.buf) < 12 + hlen:
                return
            self.header = read_header(bytes(self.buf[:12 + hlen]))
            self.bpt = json.loads(bytes(self.buf[12:12 + hlen]))["bytes_per_token"]
            del self.buf[:12 + hlen]
        while len(self.kv) < self.header.n_tokens:
            n = min(CHUNK_TOKENS, self.header.n_tokens - len(self.kv))
            size = n * self.bpt + 4
            if len(self.buf) < size:
                return
            body = bytes(self.buf[:n * self.bpt])
            (crc,) = struct.unpack("<I", self.buf[n * self.bpt:size])
            if zlib.crc32(body) != crc:
                self.bad = True
                return
            self.kv.extend(body[i * self.bpt:(i + 1) * self.bpt] for i in range(n))
            del self.buf[:size]


def validate(chunks) -> int:
    p = _Parser()
    for c in chunks:
        p.feed(c)
    return len(p.kv) if p.header is not None else 0


class _Restorer:
    def __init__(self, engine: SimEngine, ctx: int) -> None:
        self.engine, self.ctx = engine, ctx
        self.p = _Parser()

    def feed(self, data: bytes) -> None:
        self.p.feed(bytes(data))
        if self.p.header is not None and self.p.header.model_id != self.engine.model_id:
            raise ValueError("image of another model")

    def finish(self) -> int:
        if self.p.header is None:
            raise ValueError("no header")
        n = len(self.p.kv)
        self.engine._tokens[self.ctx] = list(self.p.header.tokens[:n])
        self.engine._kv[self.ctx] = list(self.p.kv)
        self.engine.restores += 1
        return n


class SimEngine:
    def __init__(self, model_id: str = "sim-model-a", n_slots: int = 2, capacity: int = 4096,
                 opener: int = 1, piece_bytes: int = 1 << 20, bytes_per_token: int = 16384) -> None:
        self.model_id = model_id
        self.kv_type = "f16"
        self.n_layer = 2
        self.n_head_kv = 1
        self.bytes_per_token = bytes_per_token
        self.n_slots = n_slots
        self.n_contexts = n_slots + 1
        self.message_opener_ids = [opener]
        self.capacity = capacity
        self.piece_bytes = piece_bytes  # size of the pieces snapshot_chunks yields
        self._tokens: dict[int, list[int]] = {c: [] for c in range(self.n_contexts)}
        self._kv: dict[int, list[bytes]] = {c: [] for c in range(self.n_contexts)}
        self.prefilled = 0  # tokens computed by prefill (what a restore saves)
        self.restores = 0

    # -- contexts -------------------------------------------------------------------------------
    def _check(self, ctx: int) -> None:
        if not 0 <= ctx < self.n_contexts:
            raise IndexError(f"no context {ctx}")

    def context_capacity(self, ctx: int) -> int:
        return self.capacity

    def context_tokens(self, ctx: int) -> list[int]:
        self._check(ctx)
        return list(self._tokens[ctx])

    def context_len(self, ctx: int) -> int:
        return len(self._tokens[ctx])

    def context_bytes(self, ctx: int) -> int:
        return len(self._tokens[ctx]) * self.bytes_per_token

    def prefill(self, ctx: int, tokens) -> None:
        self._check(ctx)
        for t in tokens:
            prev = self._kv[ctx][-1] if self._kv[ctx] else b""
            self._kv[ctx].append(_kv(prev, int(t), self.model_id, self.bytes_per_token))
            self._tokens[ctx].append(int(t))
            self.prefilled += 1

    def truncate(self, ctx: int, n: int) -> None:
        self._tokens[ctx] = self._tokens[ctx][:n]
        self._kv[ctx] = self._kv[ctx][:n]

    # -- snapshots ------------------------------------------------------------------------------
    def snapshot(self, ctx: int, n: int | None = None) -> bytes:
        return b"".join(self.snapshot_chunks(ctx, n))

    def snapshot_chunks(self, ctx: int, n: int | None = None):
        toks = self._tokens[ctx][: n if n is not None else None]
        kv = self._kv[ctx][: len(toks)]
        head = json.dumps({"model_id": self.model_id, "kv_layout": "sim", "n_tokens": len(toks),
                           "tokens": toks, "bytes_per_token": self.bytes_per_token}).encode()
        out = bytearray(MAGIC + struct.pack("<I", len(head)) + head)
        for i in range(0, len(toks), CHUNK_TOKENS):
            body = b"".join(kv[i:i + CHUNK_TOKENS])
            out += body + struct.pack("<I", zlib.crc32(body))
            while len(out) >= self.piece_bytes:
                yield bytes(out[: self.piece_bytes])
                del out[: self.piece_bytes]
        if out:
            yield bytes(out)

    def restorer(self, ctx: int) -> _Restorer:
        self._check(ctx)
        return _Restorer(self, ctx)

    def restore(self, ctx: int, data: bytes) -> int:
        r = self.restorer(ctx)
        r.feed(data)
        return r.finish()

    # -- "generation" ---------------------------------------------------------------------------
    def continue_greedy(self, ctx: int, prompt, n_new: int = 5) -> list[int]:
        """Read the part of `prompt` the context lacks, then produce n_new tokens from the KV."""
        held = self._tokens[ctx]
        if prompt[: len(held)] != held:
            raise AssertionError("context holds a history that is not a prefix of the prompt")
        self.prefill(ctx, prompt[len(held):])
        out = []
        for _ in range(n_new):
            t = int.from_bytes(hashlib.blake2b(self._kv[ctx][-1], digest_size=4).digest(), "little") % 50000 + 2
            out.append(t)
            self.prefill(ctx, [t])
        return out


class SimFormat:
    """The `image_format` argument of ConversationCache for the simulated engine."""

    MAGIC = MAGIC

    read_header = staticmethod(read_header)
    validate = staticmethod(validate)

    @staticmethod
    def chunk_tokens_for(bytes_per_token: int) -> int:
        return CHUNK_TOKENS
