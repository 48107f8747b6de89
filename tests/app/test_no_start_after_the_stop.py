"""Once a stop is asked (Quit, or a Restart's stop), the worker starts no server for the old start, however long its
look for the model file took (a slow or hung drive). It started one after the look and then stopped it itself: a
model loaded for nothing, and a server the stop had not seen. Real child processes; the look is a function that
waits to be let go, as a slow drive's stat() does."""

from __future__ import annotations

import sys
import threading

from strata.app.restart_policy import ModelFile
from strata.app.supervisor import ServerSupervisor

from tests.app.test_supervisor import wait_state


def test_no_server_is_started_once_the_stop_is_asked(tmp_path):
    started = tmp_path / "started"
    server = [sys.executable, "-c", f"open({str(started)!r}, 'w').close(); import sys; sys.stdin.read()"]
    looking, go_on = threading.Event(), threading.Event()

    def slow_look(env):
        looking.set()
        go_on.wait(30)
        return ModelFile(None)          # the default model: nothing to wait for, the server may start

    sup = ServerSupervisor(None, tmp_path / "logs", command=server, model_probe=slow_look)
    sup.start()
    try:
        assert looking.wait(10)
        sup.ask_stop()                  # the GUI thread's first step of a Quit or Restart
        go_on.set()
        sup._thread.join(10)
        assert not sup._thread.is_alive()
    finally:
        go_on.set()
        sup.stop()
    st = wait_state(sup, {"stopped"})
    events = [text for _, text in sup.events]
    assert st.run == 0 and not started.exists(), events
    assert not [e for e in events if e.startswith("server started")], events
    assert "start not made: its stop was asked during the look for the model file" in events, events
