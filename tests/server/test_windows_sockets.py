"""The server's listening socket and busy-port check as they behave on Windows: no SO_REUSEADDR there (on
Windows it lets a second server bind a port another one listens on), and the hint for Windows' reserved
port ranges (WSAEACCES). Run here by setting os.name, which is what the code branches on; not here: the
rest of start-up (test_start_up_mistakes.py)."""

from __future__ import annotations

import asyncio
import errno
import os
import socket

import pytest
from aiohttp import web
from strata.server.cli import WSAEACCES, bind_hint, listen_site, port_taken, reuse_address


def _listening_socket_reuseaddr() -> int:
    """SO_REUSEADDR of the socket listen_site opens on 127.0.0.1 (any free port)."""
    async def go() -> int:
        runner = web.AppRunner(web.Application(), handle_signals=False)
        await runner.setup()
        try:
            site = listen_site(runner, "127.0.0.1", 0)
            await site.start()
            server = site._server
            assert server is not None and server.sockets
            return server.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
        finally:
            await runner.cleanup()

    return asyncio.run(go())


def test_the_listening_socket_sets_reuseaddr_on_posix_only(monkeypatch):
    assert reuse_address() is (os.name == "posix")
    assert _listening_socket_reuseaddr() != 0          # Linux: a restart rebinds a port in TIME_WAIT
    with monkeypatch.context() as m:                   # os.name back before any assert (pytest's report
        m.setattr(os, "name", "nt")                    # would make WindowsPaths)
        windows = reuse_address(), _listening_socket_reuseaddr()
    assert windows == (False, 0)                       # was set on Windows too (reuse_address=True)


@pytest.mark.parametrize("os_name", ["posix", "nt"])
def test_a_port_another_server_listens_on_is_reported_busy(monkeypatch, os_name):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with monkeypatch.context() as m:
            m.setattr(os, "name", os_name)
            busy = port_taken("127.0.0.1", port)
    assert busy is not None and "is another server running there?" in busy


def test_windows_reserved_port_ranges_get_their_own_hint():
    hint = bind_hint(WSAEACCES, 8080)
    assert "excludedportrange" in hint and "--port chooses another" in hint
    assert "another server" in bind_hint(errno.EADDRINUSE, 8080)       # unchanged
    assert "administrator" in bind_hint(errno.EACCES, 80)               # unchanged
