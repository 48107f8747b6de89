"""--answer-unread-s's measure and rule on each platform's path (socket_queue.measure, unread_answer.look), on
real sockets: an aiohttp answer written faster (100 KB/s) than its client reads (20 KB/s) is taken, one whose
client reads nothing is not. Before, where the system did not say how many bytes its client acknowledged
(macOS, Windows: 'fewer bytes waiting than at the last look'), the slow reader was ended: behind a faster
answer, more waits at every look. The platform is a parameter: Linux's kernel queue (SIOCOUTQ) and Windows'
transport buffer alone are both run here."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from aiohttp import web
from strata.server.socket_queue import measure
from strata.server.unread_answer import first_look, gone_unread, look

LIMIT_S = 1.0
RUN_S = 4.0
LOOK_S = 0.25


def _watched_answer(platform: str, read_every_s: float | None) -> bool:
    """Whether a client reading 2 KB every `read_every_s` (None: never) counted as gone within RUN_S."""
    gone = []

    async def handler(request: web.Request) -> web.StreamResponse:
        # a kernel send buffer of a fixed size: Linux's grows to 4 MiB here, which a buffer-only measure
        # (Windows') waits to see filled before a client that reads nothing counts as taking none
        request.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        resp = web.StreamResponse()
        await resp.prepare(request)

        async def watch() -> None:
            r = first_look(time.monotonic(), *measure(request, platform))
            while True:
                await asyncio.sleep(LOOK_S)
                now = time.monotonic()
                r = look(r, now, *measure(request, platform))
                if gone_unread(r, now, LIMIT_S):
                    gone.append(now)
                    request.transport.abort()
                    return

        watcher = asyncio.ensure_future(watch())
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < RUN_S and not gone:
                await resp.write(b"x" * 2048)
                await asyncio.sleep(0.02)
        except (ConnectionError, RuntimeError):
            pass
        finally:
            watcher.cancel()
        return resp

    async def go() -> None:
        app = web.Application()
        app.router.add_get("/", handler)
        runner = web.AppRunner(app, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        stop = threading.Event()

        def client() -> None:
            sk = socket.socket()
            sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sk.connect(("127.0.0.1", port))
            sk.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            sk.settimeout(RUN_S + 5)
            try:
                while not stop.is_set():
                    if read_every_s is None:
                        time.sleep(0.05)
                        continue
                    if not sk.recv(2048):
                        return
                    time.sleep(read_every_s)
            except OSError:
                return
            finally:
                sk.close()

        th = threading.Thread(target=client, daemon=True)
        th.start()
        try:
            await asyncio.sleep(RUN_S + 1)
        finally:
            stop.set()
            await runner.cleanup()
        th.join(10)

    asyncio.run(go())
    return bool(gone)


@pytest.mark.parametrize("platform", ["linux", "win32"])
def test_a_slow_reader_is_not_ended(platform):
    assert not _watched_answer(platform, read_every_s=0.1)


@pytest.mark.parametrize("platform", ["linux", "win32"])
def test_a_client_that_reads_nothing_is_ended(platform):
    assert _watched_answer(platform, read_every_s=None)
