"""The window shows the server's states in one order: a stop asked while the model loads (or while a restart's new
server loads) is never followed by that server's "starting" or "running". The supervisor's threads each set the
state, the check before a set and the set apart: a load ending as Quit or Restart was asked showed "running" after
"stopping" (and then "stopped"); a poll between the click and the stopping thread's first step showed the load
going on under the header's "waiting for the server to stop"; an old server's late "stopping: keeping ..." line
could land on the new one's "starting" (app/state_order.py).

The server is a stand-in (a real child process): it says where it listens, answers /health "loading" for LOAD_S,
then takes HOLD_S to give its first "ok" (a load's last step, after which the real server serves), saying so on
its output first; it finishes that step whatever it is told meanwhile (SIGTERM ignored; its input's end waited on).
The app, its window (offscreen), its supervisor and their threads are real."""

from __future__ import annotations

import shutil
import sys

import pytest

pytest.importorskip("PySide6")
from strata.app.controller import AppController  # noqa: E402
from strata.app.state_order import Shown, ask_stop, begin, takes  # noqa: E402

from tests.app.shown import follow, runs  # noqa: E402
from tests.app.stand_in_server import stand_in_server  # noqa: E402

LOAD_S = 1.0
HOLD_S = 1.5

SERVER = stand_in_server(f"""
    ok = time.monotonic() >= ready_at
    if ok and first_ok.acquire(blocking=False):
        print("answering ok", flush=True)
        time.sleep({HOLD_S})
    body = b'{{"status": "ok"}}' if ok else b'{{"status": "loading"}}'
    status = 200 if ok else 503
""", head=f"""
signal.signal(signal.SIGTERM, signal.SIG_IGN)
ready_at = time.monotonic() + {LOAD_S}
first_ok = threading.Lock()
""", says=" (loading the model)", tail=f"time.sleep({HOLD_S} + 0.5)")


def _holding(controller, log, n: int):
    """Until the n-th server has begun its first "ok" (its load's last step)."""
    return lambda s: log.is_file() and log.read_text().count("answering ok") >= n


@pytest.mark.parametrize("restart_first", [False, True], ids=["quit-during-the-load",
                                                              "quit-during-a-restarts-load"])
def test_a_stop_during_the_load_is_never_followed_by_the_load(qtbot, tmp_path, artifacts, restart_first):
    controller = AppController(None, tmp_path / "logs", theme="light", command=[sys.executable, "-c", SERVER])
    log = tmp_path / "logs" / "server.log"
    controller.start(show=True)
    shown: list = []
    try:
        follow(controller, _holding(controller, log, 1), shown=shown)
        if restart_first:
            controller.restart_server()     # its stop asked as its server ends its load; the new one loads
            follow(controller, _holding(controller, log, 2), shown=shown)
        loading = shown[-1]
        assert loading.state == "starting" and "loading the model" in loading.status, shown
        at_quit = len(shown)
        controller.quit()
        follow(controller, lambda s: s.state == "stopping", shown=shown)
        shot = artifacts / f"app-stop-during-the-load{'-after-a-restart' if restart_first else ''}.png"
        controller.window.save_png(shot)     # drawn as shown now (its header too)
        shutil.copy(shot, tmp_path / shot.name)
        follow(controller, lambda s: s.state == "stopped", timeout_s=60, shown=shown)
        controller.timer.start()
        qtbot.waitUntil(lambda: controller._shut, timeout=60_000)
    finally:
        controller.shutdown()
    events = [text for _, text in controller.supervisor.events]
    states = runs(shown)
    # each stop asked: stopping, then stopped (too brief to be seen before a restart's start), never the load again
    want = ["starting", "stopping", "starting", "stopping", "stopped"] if restart_first else \
        ["starting", "stopping", "stopped"]
    assert [s for i, s in enumerate(states) if s != "stopped" or i == len(states) - 1] == want, (states, events)
    # the status bar as the user read it: the stop's wording at once, no server counted as loading or running after
    stop = [s.status for s in shown[at_quit:]]
    assert stop[0] == "Server stopping: stopping the server while it loads its model (nothing served yet: nothing " \
                      "to keep)", stop
    assert all(t.startswith(("Server stopping", "Server stopped")) for t in stop), stop
    assert all("for the server to stop" in s.header for s in shown[at_quit:] if s.state == "stopping"), shown
    assert not [e for e in events if e.startswith("running:")], events


def test_the_states_order():
    shown = begin(Shown(0, "stopped", "not started"), "starting the server")
    assert shown == Shown(1, "starting", "starting the server")
    assert takes(shown, 1, "running") and takes(shown, 1, "failed") and takes(shown, 1, "stopping")
    assert not takes(shown, 0, "starting")                  # the last life's worker, late
    asked = ask_stop(shown)
    assert not takes(asked, 1, "starting") and not takes(asked, 1, "running") and not takes(asked, 1, "restarting")
    assert takes(asked, 1, "stopping") and takes(asked, 1, "stopped")
    stopping = Shown(1, "stopping", "stopping the server", stop_asked=True)
    assert takes(stopping, 1, "stopping", progress=True)    # the server's own line about its stop
    assert not takes(shown, 1, "stopping", progress=True)   # said before the app asked: not shown over "starting"
    stopped = Shown(1, "stopped", "stopped", stop_asked=True)
    assert not takes(stopped, 1, "stopping") and not takes(stopped, 1, "stopping", progress=True)
    restarted = begin(stopped, "starting the server")
    assert restarted.life == 2 and not restarted.stop_asked
    assert not takes(restarted, 1, "stopping", progress=True)   # the old server's late line, over the new start
    with pytest.raises(ValueError, match="unknown server state 'paused'"):
        takes(shown, 1, "paused")
