"""A closed Windows console window (a log-off, a shutdown): our console handler (server/console_close.py) starts
the stop and returns only once the stop has ended, or at CLOSE_HOLD_S when it is slow; Windows ends the process
when it returns. Simulated on Linux: a shim replaces the ctypes registration with a SIGUSR2 handler that calls the
registered handler on a thread of its own, as Windows calls it on a thread it creates, and ends the process with
os._exit when it answers True, as Windows does. Before, nothing held the close: the C runtime's handler returned
at once and the process ended with nothing parked. Not here: Ctrl-C / Ctrl-Break (test_windows_stop_signals.py)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from strata.server import console_close

from tests.server.test_auth_and_lifecycle import listening_port, wait_healthy
from tests.server.test_terminal_closed import one_conversation, parked
from tests.server.test_windows_stop_signals import start_shimmed_server

WINDOWS_ENDED = 42    # the shim's exit status once the handler answered True (Windows: STATUS_CONTROL_C_EXIT)

SHIM = """
import os, signal, sys, threading, time
from strata.server import console_close

def register(handler):
    def on_close(sig, frame):
        def windows_thread():
            began = time.monotonic()
            handled = handler(console_close.CTRL_CLOSE_EVENT)
            print(f"handler returned {handled} after {time.monotonic() - began:.2f} s", file=sys.stderr, flush=True)
            if handled:
                os._exit(WINDOWS_ENDED)
        threading.Thread(target=windows_thread).start()
    signal.signal(signal.SIGUSR2, on_close)
    return lambda: print("console handler unregistered", file=sys.stderr, flush=True)

console_close.register = register
from strata.cli import main
sys.exit(main(sys.argv[1:]))
""".replace("WINDOWS_ENDED", str(WINDOWS_ENDED))


def start_server(tiny_model, tmp_path, **env_extra) -> subprocess.Popen:
    return start_shimmed_server(SHIM, tiny_model, tmp_path, **env_extra)


def close_console_after_a_conversation(proc: subprocess.Popen, tmp_path) -> tuple[str, float]:
    """Serves one conversation, closes the "console", waits for the process; its log and the handler's wait."""
    try:
        port = listening_port(tmp_path / "server.log", proc)
        wait_healthy(port, proc)
        one_conversation(port)
        assert parked(tmp_path) == []
        proc.send_signal(signal.SIGUSR2)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "server.log").read_text()
    held = re.search(r"handler returned True after ([\d.]+) s", log)
    assert held, log
    return log, float(held.group(1))


def test_a_closed_console_is_held_until_the_stop_has_parked_the_conversation(tiny_model, tmp_path):
    proc = start_server(tiny_model, tmp_path)
    log, _ = close_console_after_a_conversation(proc, tmp_path)
    assert proc.returncode == WINDOWS_ENDED, log
    assert "the console window was closed" in log and "Traceback" not in log, log
    assert len(parked(tmp_path)) == 1, log
    # the handler returned only after the stop had ended (its last line) and the handler was unregistered
    assert log.index("stopped; kept for the next start") < log.index("console handler unregistered") \
        < log.index("handler returned True"), log


def test_a_slow_stop_is_held_until_the_deadline_then_windows_ends_it(tiny_model, tmp_path):
    proc = start_server(tiny_model, tmp_path, STRATA_TEST_DISK_WRITE_DELAY_S="30")   # the park's write: 30 s
    log, waited = close_console_after_a_conversation(proc, tmp_path)
    assert proc.returncode == WINDOWS_ENDED, log
    assert console_close.CLOSE_HOLD_S - 0.1 <= waited < console_close.CLOSE_HOLD_S + 1.5, log
    assert "the stop has not ended after 4.5 s" in log, log
    assert "stopped; kept" not in log and parked(tmp_path) == [], log


# ----- the hold alone, driven from a thread as Windows calls it -----------------------------------------------


def call_on_a_thread(hold: console_close.ConsoleCloseHold, event: int) -> tuple[list[bool], threading.Thread]:
    answer: list[bool] = []
    thread = threading.Thread(target=lambda: answer.append(hold(event)))
    thread.start()
    return answer, thread


@pytest.mark.parametrize("event", [console_close.CTRL_C_EVENT, console_close.CTRL_BREAK_EVENT])
def test_ctrl_c_and_ctrl_break_are_left_to_the_signal_handlers(event):
    started: list[int] = []
    hold = console_close.ConsoleCloseHold(lambda: started.append(1), hold_s=5)
    answer, thread = call_on_a_thread(hold, event)
    thread.join(1)
    assert answer == [False] and started == []


@pytest.mark.parametrize("event", sorted(console_close.HELD_EVENTS))
def test_close_logoff_and_shutdown_start_the_stop_and_wait_for_its_end(event):
    started = threading.Event()
    hold = console_close.ConsoleCloseHold(started.set, hold_s=5)
    answer, thread = call_on_a_thread(hold, event)
    assert started.wait(2)
    time.sleep(0.3)
    assert thread.is_alive() and answer == []      # still held: the stop has not ended
    began = time.monotonic()
    hold.stopped()
    thread.join(2)
    assert answer == [True] and time.monotonic() - began < 0.5


def test_a_stop_that_does_not_end_is_held_until_the_deadline():
    hold = console_close.ConsoleCloseHold(lambda: None, hold_s=0.6)
    began = time.monotonic()
    answer, thread = call_on_a_thread(hold, console_close.CTRL_CLOSE_EVENT)
    thread.join(3)
    assert answer == [True] and 0.6 <= time.monotonic() - began < 1.5


def test_after_the_stop_a_close_is_answered_at_once_and_a_closed_loop_is_not_an_error():
    hold = console_close.ConsoleCloseHold(lambda: None, hold_s=5)
    hold.stopped()
    began = time.monotonic()
    assert hold(console_close.CTRL_CLOSE_EVENT) is True and time.monotonic() - began < 0.2

    def closed_loop() -> None:
        raise RuntimeError("Event loop is closed")     # what call_soon_threadsafe raises then
    assert console_close.ConsoleCloseHold(closed_loop, hold_s=5)(console_close.CTRL_SHUTDOWN_EVENT) is True


def test_register_does_nothing_off_windows():
    assert sys.platform != "win32"
    unregister = console_close.register(lambda event: True)
    unregister()
