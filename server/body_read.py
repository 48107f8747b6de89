"""Reading a request body, answered whatever the bytes do: a body whose framing breaks after the
headers, or that stops arriving, gets an error in the API's shape instead of a handler waiting on it.

What this is: `read_body(request)`, the one place a handler reads a body. aiohttp's C parser, when the
chunked framing breaks after the headers were read (a chunk size that is not hex, chunk data without
its CRLF), queues the error as the connection's next request instead of failing the body being read:
the handler waited until the client hung up. Here the read watches for that error (400, naming it) and
for a body that sends nothing for `--body-idle-s` (408: a stalled client, a Content-Length larger
than what was sent, a chunked body without its last chunk). Either answer closes the connection: what
follows on it is not a request. What this is not: the JSON checks (fields.py), nor aiohttp's own
plain-text 400 for a request line or header it cannot parse, sent before any handler runs (docs/api.md,
"Malformed requests").

Bodies: the server's application asks aiohttp's parser to decode none (`HANDLER_ARGS`): the parser decoded
deflate, br and zstd itself and, for a body that did not decode arriving with its headers (what `curl -d`
sends), answered its own plain-text 400 ('deflate') before any handler could say that only gzip is read
(fields.refused_encoding's 415). A gzip body is inflated here, its inflated size held to the body limit.
"""

from __future__ import annotations

import asyncio
import zlib

from aiohttp import web
from aiohttp.http_exceptions import PayloadEncodingError
from aiohttp.web_protocol import RequestPayloadError
from strata.server.errors import APIError
from strata.server.keys import served_option
from strata.server.parser_fault_log import client_fault

try:   # aiohttp's record of a parse error on the connection; without it only the idle bound applies
    from aiohttp.web_protocol import _ErrInfo
except ImportError:  # pragma: no cover - another aiohttp
    _ErrInfo = None

POLL_S = 0.05   # how often a read still in progress looks for a framing error and for progress
CLOSE = {"Connection": "close"}
HANDLER_ARGS = {"auto_decompress": False}   # web.Application(handler_args=...): the parser decodes no body
BODIES_UNDECODED = web.AppKey("bodies_undecoded", bool)   # set where HANDLER_ARGS are: read_body inflates gzip
GZIP_NAMES = ("gzip", "x-gzip")
MAX_GZIP_MEMBERS = 4096   # bgzip's 64 KiB blocks of a 256 MiB body; 20 bytes make a member, each one a decoder
FIRST_WINDOW = 4096       # bytes of a member fed first, doubled while it goes on


def framing_error(request: web.Request) -> str:
    """The parser's message when the bytes after this request's headers broke the HTTP framing, or ""."""
    if _ErrInfo is None:
        return ""
    for msg, _ in list(getattr(request.protocol, "_messages", ()) or ()):
        if isinstance(msg, _ErrInfo):
            lines = [ln.strip() for ln in str(msg.message).splitlines()]
            return " ".join(ln for ln in lines if ln and set(ln) != {"^"})
    return ""


def idle_bound(app: web.Application) -> float:
    """--body-idle-s."""
    return float(served_option(app, "body_idle_s"))


async def read_body(request: web.Request) -> bytes:
    """The whole body, inflated when it is gzip; APIError 400 for framing or a gzip body that does not
    inflate, 408 when nothing arrives for --body-idle-s, 413 over --max-body-mib (inflated)."""
    raw = await _read_raw(request)
    encodings = [e.strip().lower() for e in request.headers.get("Content-Encoding", "").split(",") if e.strip()]
    if not request.app.get(BODIES_UNDECODED) or not any(e in GZIP_NAMES for e in encodings):
        return raw
    return inflated(raw, request.app._client_max_size)  # noqa: SLF001 - aiohttp keeps the limit there only


def inflated(raw: bytes, limit: int) -> bytes:
    """A gzip body (one member or several, as the format allows) inflated, at most `limit` bytes of it:
    413 beyond (20 MB of JSON fits in 20 KB of gzip), 400 when the bytes are not whole gzip or hold more than
    MAX_GZIP_MEMBERS members. Each member is fed in growing windows: zlib copies the input left after a
    member (unused_data), and the whole rest of the body behind each of 800,000 empty 20-byte members
    (16 MiB) held the event loop for minutes."""
    out, view, pos = bytearray(), memoryview(raw), 0
    try:
        for _ in range(MAX_GZIP_MEMBERS):
            d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            window = FIRST_WINDOW
            while not d.eof:
                if pos >= len(view):
                    raise zlib.error("the gzip data ends early")
                piece = view[pos:pos + window]
                pos += len(piece)
                window *= 2            # the copy after a member is at most about the member's own size
                out += d.decompress(piece, limit + 1 - len(out))
                if len(out) > limit or d.unconsumed_tail:
                    raise APIError(413, f"the request body is larger than the limit of {limit} bytes once "
                                        "inflated (--max-body-mib)")
            pos -= len(d.unused_data)
            if pos == len(view) or view[pos] == 0:
                if not bytes(view[pos:]).strip(b"\0"):   # padding after the last member, as gzip(1) tolerates
                    return bytes(out)
                raise zlib.error("bytes after the padding")
    except zlib.error:
        raise APIError(400, "the request body cannot be read: Can not decode content-encoding: gzip",
                       headers=CLOSE) from None
    raise APIError(400, f"the request body cannot be read: more than {MAX_GZIP_MEMBERS} gzip members",
                   headers=CLOSE)


async def _read_raw(request: web.Request) -> bytes:
    idle_s = idle_bound(request.app)
    loop = asyncio.get_running_loop()
    task: asyncio.Future | None = None
    seen, quiet_since = -1, loop.time()
    try:
        if request.content.is_eof():
            # the whole body is in (a small one comes with its headers): read at once, no framing or pause
            # left to watch for (the watch below costs a task and two turns of the loop a request)
            return await request.read()
        task = asyncio.ensure_future(request.read())
        while True:
            done, _ = await asyncio.wait({task}, timeout=POLL_S)
            if done:
                return task.result()
            broken = framing_error(request)
            if broken:
                raise APIError(400, f"the request body's HTTP framing is broken: {broken}", headers=CLOSE)
            n = request.content.total_bytes
            if n != seen:
                seen, quiet_since = n, loop.time()
            elif loop.time() - quiet_since >= idle_s:
                raise APIError(408, f"the request body stopped arriving: nothing for {idle_s:g} s after {n} "
                               "bytes (--body-idle-s); send the whole body (Content-Length or chunks "
                               "ending with the last, empty chunk)", headers=CLOSE)
    except web.HTTPRequestEntityTooLarge:
        limit = request.app._client_max_size  # noqa: SLF001 - aiohttp keeps the limit there only
        raise APIError(413, f"the request body is larger than the limit of {limit} bytes (--max-body-mib)") from None
    except (RequestPayloadError, PayloadEncodingError) as e:
        # e.g. 'Content-Encoding: gzip' over bytes that are not gzip, or (pure-Python parser) bad chunks
        raise APIError(400, f"the request body cannot be read: {client_fault(e)}", headers=CLOSE) from None
    finally:
        if task is not None and not task.done():
            task.cancel()
