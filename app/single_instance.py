"""One app per user: the first launch listens on a local socket; a second launch finds it, asks it to
come forward and exits. An app that is quitting (stopping its server: a minute or more for a big model's
conversations) answers so, and the second launch waits for it to end and then starts, instead of exiting
on the word of an app about to go. (QLocalServer: a named pipe on Windows, a socket file elsewhere.)

Qt mechanism only; what "come forward" means is the caller's `on_activate`.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re
from collections.abc import Callable

from PySide6.QtCore import QTimer
from PySide6.QtNetwork import QLocalServer, QLocalSocket

ACTIVATE = b"activate\n"
CAME_FORWARD = b"forward\n"
QUITTING = b"quitting\n"
QUIT_WAIT_S = 900.0     # a second launch's wait (quit_wait.py): the quitting app gives its server up to 10 minutes
QUIT_POLL_S = 0.5
# How long a second launch waits for the running app's answer once connected: a busy app (its GUI thread held,
# a loaded machine) answered a quitting launch 1.5 s after the knock, which a 1 s wait took for "forward" and
# exited, leaving nothing running once the first had quit. Silence still counts as "forward" after this.
ANSWER_WAIT_MS = 5000


def instance_name(suffix: str = "", windows: bool | None = None) -> str:
    """The local socket's name for this user: `strata-app-USER`, the characters a pipe or socket name takes kept and
    the others replaced; where any was replaced, with a hash of the whole name after it. Windows' named pipes are
    one namespace for every user of the machine, and without it 'Дима' and 'Юлия' were both `strata-app-____`:
    the second to start was told another user's app was running (or could not listen under the name). On Windows
    the user is DOMAIN\\USER (USERDOMAIN): on a shared or remote-desktop machine CORP\\alice and the local alice
    are two users whose USERNAME is the same."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "user"
    domain = os.environ.get("USERDOMAIN", "")
    if (os.name == "nt" if windows is None else windows) and domain:
        user = domain + "\\" + user
    kept = re.sub(r"[^A-Za-z0-9_.-]", "_", user + suffix)
    if kept != user + suffix:
        kept += "-" + hashlib.sha256((user + suffix).encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return "strata-app-" + kept


def ask_running_instance(name: str, timeout_ms: int = 1000, answer_ms: int = ANSWER_WAIT_MS) -> str | None:
    """None when no app listens under `name` (connected within `timeout_ms`); else its answer to "come forward":
    "forward", or "quitting" (it is on its way out). An app that does not answer within `answer_ms` (an older one,
    a hung one) counts as "forward"."""
    sock = QLocalSocket()
    sock.connectToServer(name)
    if not sock.waitForConnected(timeout_ms):
        return None
    sock.write(ACTIVATE)
    sock.flush()
    sock.waitForBytesWritten(timeout_ms)
    reply = bytes(sock.readAll().data()) if sock.waitForReadyRead(max(timeout_ms, answer_ms)) else b""
    sock.disconnectFromServer()
    return _answer(reply)


def _answer(reply: bytes) -> str:
    return "quitting" if reply.startswith(QUITTING.strip()) else "forward"


def ask_later(name: str, on_answer: Callable[[str | None], None], timeout_ms: int = 1000,
              silence: str = "forward") -> QLocalSocket:
    """ask_running_instance without blocking the caller's event loop (a window stays drawn and its Cancel
    answers): `on_answer` gets the same answers once, later; an app that does not answer within `timeout_ms`
    counts as `silence`. Keep the returned socket until then."""
    sock = QLocalSocket()
    timer = QTimer(sock)
    timer.setSingleShot(True)
    done: list[bool] = []

    def finish(answer: str | None) -> None:
        if done:
            return
        done.append(True)
        timer.stop()
        sock.abort()
        on_answer(answer)

    def read() -> None:
        if sock.canReadLine():
            finish(_answer(bytes(sock.readLine().data())))

    def failed(error: QLocalSocket.LocalSocketError) -> None:
        # before the connection: nothing listens (it has ended); after it: it hung up without a word
        finish(None if sock.state() != QLocalSocket.LocalSocketState.ConnectedState and
               error != QLocalSocket.LocalSocketError.PeerClosedError else silence)

    sock.connected.connect(lambda: sock.write(ACTIVATE))
    sock.readyRead.connect(read)
    sock.errorOccurred.connect(failed)
    timer.timeout.connect(lambda: finish(silence))
    timer.start(timeout_ms)
    sock.connectToServer(name)
    return sock


class SingleInstance:
    """Listens under `name`; calls `on_activate()` when a second launch knocks, and answers with what it
    returned: True, came forward; False, quitting."""

    def __init__(self, name: str, on_activate: Callable[[], bool]) -> None:
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
            sock.write(CAME_FORWARD if self.on_activate() is not False else QUITTING)
            sock.flush()

    def close(self) -> None:
        self.server.close()
