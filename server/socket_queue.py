"""What a client's connection holds that it has not taken, and how much of what was written it has taken: the
bytes in the transport's buffer and the kernel's send queue, against the bytes written to the connection.
Read with one system call, so a look every quarter second costs nothing. The kernel's queue is read on Linux
(SIOCOUTQ: sent but not acknowledged, or not sent) and macOS (SO_NWRITE); elsewhere (Windows) only the
transport's buffer counts, and what left it is what the kernel took, which it does only as the client reads
once its buffers are full."""

from __future__ import annotations

import socket
import struct
import sys
from typing import Any

from aiohttp import web

# bytes sent on a WebSocket (its frames bypass request.writer): responses_socket counts them here
WS_SENT: Any = web.RequestKey("strata_ws_sent", int) if hasattr(web, "RequestKey") else "strata_ws_sent"


def unsent_bytes(transport: Any, platform: str = sys.platform) -> int:
    """Bytes written for the client that it has not taken (0 without a transport)."""
    if transport is None:
        return 0
    n = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is None:
        return n
    try:
        if platform.startswith("linux"):
            import fcntl
            import termios

            return n + struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
        if platform == "darwin":
            return n + sock.getsockopt(socket.SOL_SOCKET, 0x1024)     # SO_NWRITE
    except OSError:
        pass
    return n


def count_sent(request: web.Request, n: int) -> None:
    """A WebSocket frame of `n` bytes was written (fewer counted, its header left out: that only counts less
    taken, never a client that took none as taking)."""
    request[WS_SENT] = request.get(WS_SENT, 0) + n


def written_bytes(request: web.Request) -> int:
    """Bytes written to the request's connection: the HTTP answer's (headers and body, as aiohttp's writer
    counts them) and a WebSocket's frames."""
    return int(request.writer.output_size) + request.get(WS_SENT, 0)


def measure(request: web.Request, platform: str = sys.platform) -> tuple[int, int]:
    """(unsent, taken): the bytes waiting for the client, and the bytes of all written that it took. Taken is
    counted, not read from fewer bytes waiting: a slow reader behind a faster answer has more waiting at each
    look, yet takes."""
    unsent = unsent_bytes(request.transport, platform)
    return unsent, written_bytes(request) - unsent
