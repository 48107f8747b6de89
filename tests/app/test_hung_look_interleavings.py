"""A stopped life's worker held in a look at a file (a drive not answering) starts nothing, whichever way its look's
end falls against the Restart: before the new start is made, or after it (the new worker then waiting for that
look). The look held is the model file's (model_probe) or the configuration's (key_probe, read just before the
spawn). Real child processes that write their pid; at most one alive at any time, one at the end."""

from __future__ import annotations

import sys
import threading
import time

import psutil
import pytest
from strata.app.restart_policy import ModelFile
from strata.app.supervisor import ServerSupervisor

from tests.app.stand_in_server import stand_in_server
from tests.app.test_supervisor import wait_state

SERVER = stand_in_server("status, body = 200, b'{\"status\": \"ok\"}'",
                         head="open(sys.argv[1], 'a').write(f'{os.getpid()}\\n')")


def held_look():
    """(hang, hung, released): hang() holds the look that calls it, as a drive that does not answer, until
    `released` is set (later looks are quick); `hung` is set as the first is held."""
    hung, released = threading.Event(), threading.Event()

    def hang():
        if not released.is_set():
            hung.set()
            released.wait(60)

    return hang, hung, released


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.mark.parametrize("held", ["model file", "configuration"])
@pytest.mark.parametrize("ends", ["before the new start", "after the new start"])
def test_the_old_look_ending_starts_no_second_server(tmp_path, held, ends):
    starts = tmp_path / "starts"
    hang, hung, released = held_look()
    probes = ({"model_probe": lambda env: (hang(), ModelFile(None))[1]} if held == "model file"
              else {"key_probe": lambda env: hang()})
    sup = ServerSupervisor(None, tmp_path / "logs", command=[sys.executable, "-c", SERVER, str(starts)],
                           stop_cap_s=0.5, **probes)
    sup.start()
    old = sup._thread
    try:
        assert hung.wait(10)
        t0 = time.monotonic()
        assert sup.stop()          # not held by the look
        assert time.monotonic() - t0 < 3
        if ends == "before the new start":
            released.set()
            old.join(10)
            assert not old.is_alive()
        sup.start()
        if ends == "after the new start":
            wait_state(sup, {"waiting"})
            released.set()
            old.join(10)
            assert not old.is_alive()
        wait_state(sup, {"running"})
        time.sleep(0.5)            # a second start, were one made, has written its pid by now
        pids = [int(p) for p in starts.read_text().split()]
        events = [text for _, text in sup.events]
        assert len(pids) == 1 and alive(pids) == pids, events
    finally:
        released.set()
        sup.stop()
    assert alive(pids) == []


def test_a_stop_during_the_wait_for_the_old_look_starts_nothing(tmp_path):
    """Restart, then Quit while the new start waits for the old look: the stop is not held by either worker, and
    neither starts a server once the look ends."""
    starts = tmp_path / "starts"
    hang, hung, released = held_look()
    sup = ServerSupervisor(None, tmp_path / "logs", command=[sys.executable, "-c", SERVER, str(starts)],
                           stop_cap_s=0.5, model_probe=lambda env: (hang(), ModelFile(None))[1])
    sup.start()
    old = sup._thread
    try:
        assert hung.wait(10)
        sup.stop()
        sup.start()
        new = sup._thread
        wait_state(sup, {"waiting"})
        sup.no_more_starts()
        t0 = time.monotonic()
        assert sup.stop()
        assert time.monotonic() - t0 < 3 and not new.is_alive()
        released.set()
        old.join(10)
        assert not old.is_alive()
        assert sup.status().state == "stopped" and not starts.exists(), [text for _, text in sup.events]
    finally:
        released.set()
        sup.stop()
