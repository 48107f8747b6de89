"""What a client's connection holds that it has not taken: the bytes in the transport's buffer and the
kernel's send queue, and the bytes the client's system acknowledged. Read with one system call each, so a
check every quarter second costs nothing. The kernel's queue is read on Linux (SIOCOUTQ) and macOS
(SO_NWRITE), the acknowledged bytes on Linux (TCP_INFO's tcpi_bytes_acked); elsewhere only what the
system tells."""

from __future__ import annotations

import socket
import struct
import sys
from typing import Any

# struct tcp_info (linux/tcp.h): tcpi_bytes_acked is the u64 at byte 120 (Linux 4.1 and later)
_BYTES_ACKED_AT = 120


def unsent_bytes(transport: Any) -> int:
    """Bytes written for the client that it has not taken (0 without a transport)."""
    if transport is None:
        return 0
    n = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is None:
        return n
    try:
        if sys.platform.startswith("linux"):
            import fcntl
            import termios

            return n + struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
        if sys.platform == "darwin":
            return n + sock.getsockopt(socket.SOL_SOCKET, 0x1024)     # SO_NWRITE
    except OSError:
        pass
    return n


def acked_bytes(transport: Any) -> int | None:
    """Bytes the client's system acknowledged (Linux TCP), else None."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None or not sys.platform.startswith("linux") or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except OSError:
        return None
    if len(info) < _BYTES_ACKED_AT + 8:
        return None
    return struct.unpack_from("Q", info, _BYTES_ACKED_AT)[0]
