"""The window's poll (status) and a Quit's or Restart's first step (ask_stop), both on the GUI thread, never wait
for a server's spawn. The spawn was made holding the supervisor's lock, and process creation can take seconds on
Windows (an antivirus scanning the executable): the window froze that long. A stop asked during the spawn still
stops the server spawned. Real supervisor, real child; only the spawn is held, by a wrapper around the real
popen_tied, since a slow CreateProcess cannot be made here."""

from __future__ import annotations

import sys
import threading

import pytest
from strata.app import supervisor as supervisor_module
from strata.app.supervisor import ServerSupervisor

from tests.app.test_supervisor import wait_state


@pytest.fixture
def held_spawn(monkeypatch):
    spawning, go_on, real = threading.Event(), threading.Event(), supervisor_module.popen_tied

    def slow_popen(*args, **kwargs):
        spawning.set()
        go_on.wait(30)                  # as long as a slow process creation takes
        return real(*args, **kwargs)

    monkeypatch.setattr(supervisor_module, "popen_tied", slow_popen)
    yield spawning, go_on
    go_on.set()


def answered_within(call, seconds: float) -> bool:
    done = threading.Event()
    threading.Thread(target=lambda: (call(), done.set()), daemon=True).start()
    return done.wait(seconds)


def test_the_gui_thread_never_waits_for_a_spawn(tmp_path, held_spawn):
    spawning, go_on = held_spawn
    sup = ServerSupervisor(None, tmp_path / "logs", command=[sys.executable, "-c", "import sys; sys.stdin.read()"],
                           stop_grace_s=5.0)
    sup.start()
    try:
        assert spawning.wait(10)
        assert answered_within(sup.status, 5.0), "status() waited for the spawn: the window froze"
        assert answered_within(sup.ask_stop, 5.0), "ask_stop() waited for the spawn: the window froze"
        stopping = threading.Thread(target=sup.stop, daemon=True)
        stopping.start()                # the stop's own thread waits for the spawn under way, then stops it
        go_on.set()
        stopping.join(30)
        assert not stopping.is_alive()
    finally:
        go_on.set()
        sup.stop()
    st = wait_state(sup, {"stopped"})
    assert st.detail == "stopped" and st.run == 1 and st.pid is None, (st, list(sup.events))
    assert sup._proc.poll() is not None
