"""One app per user: the first launch listens on a local socket; a second launch finds it, asks it to
come forward and exits. (QLocalServer: a named pipe on Windows, a socket file elsewhere.)

Qt mechanism only; what "come forward" means is the caller's `on_activate`.
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Callable

from PySide6.QtNetwork import QLocalServer, QLocalSocket

ACTIVATE = b"activate\n"


def instance_name(suffix: str = "") -> str:
    try:
        user = getpass.getuser()
    except Exception:
        user = "user"
    return "strata-app-" + re.sub(r"[^A-Za-z0-9_.-]", "_", user + suffix)


def ask_running_instance(name: str, timeout_ms: int = 1000) -> bool:
    """True when an app already listens under `name` (it has been asked to come forward)."""
    sock = QLocalSocket()
    sock.connectToServer(name)
    if not sock.waitForConnected(timeout_ms):
        return False
    sock.write(ACTIVATE)
    sock.flush()
    sock.waitForBytesWritten(timeout_ms)
    sock.disconnectFromServer()
    return True


class SingleInstance:
    """Listens under `name`; calls `on_activate()` when a second launch knocks."""

    def __init__(self, name: str, on_activate: Callable[[], None]) -> None:
        self.name = name
        self.on_activate = on_activate
        self.server = QLocalServer()
        if not self.server.listen(name):
            QLocalServer.removeServer(name)      # a stale socket file left by a crash
            if not self.server.listen(name):
                raise OSError(f"cannot listen on the local socket {name!r}: {self.server.errorString()}")
        self.server.newConnection.connect(self._accept)

    def _accept(self) -> None:
        while self.server.hasPendingConnections():
            sock = self.server.nextPendingConnection()
            sock.readyRead.connect(lambda s=sock: self._read(s))
            sock.disconnected.connect(sock.deleteLater)

    def _read(self, sock: QLocalSocket) -> None:
        if bytes(sock.readAll().data()).startswith(ACTIVATE.strip()):
            self.on_activate()

    def close(self) -> None:
        self.server.close()
