"""A starting server that answers /health "loading" is waited for, however long its load takes; only one that
answers nothing for the health timeout is killed, and the reason says the app ended it. Before, the app killed any server not serving 180 s after its
start: a big model's first read from a slow disk (gpt-oss-120b's 65 GB at ~150 MB/s) passes that, and the app
killed the loading server, started it again (reading the model anew) and gave up after STRATA_START_RETRIES.

The live test stands in a small HTTP server for `strata serve` (its "listening on" line, /health 503 "loading"
for LOAD_S, then 200): a real load longer than the timeout cannot be had in a test; the timeout is shortened
instead (health_timeout_s), as test_quiet_log_level does. While it loads, the status bar counts the load's time
(a static "loading the model" for minutes read as a hang)."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from strata.app.controller import status_text
from strata.app.restart_policy import RestartConfig, wait_for_health, wait_for_stop
from strata.app.supervisor import ServerStatus, ServerSupervisor
from strata.monitor import units

from tests.app.stand_in_server import stand_in_server
from tests.app.test_supervisor import wait_state

LOAD_S = 4.0
TIMEOUT_S = 1.5

# listens at once, says "loading" on /health for LOAD_S seconds, then serves; ends at the end of its input
LOADING_SERVER = stand_in_server("""
    ok = time.monotonic() >= ready_at
    body = b'{"status": "ok"}' if ok else b'{"status": "loading"}'
    status = 200 if ok else 503
""", head=f"ready_at = time.monotonic() + {LOAD_S}", says=" (loading the model)")


def test_a_server_still_loading_after_the_timeout_is_waited_for(tmp_path):
    sup = ServerSupervisor(None, tmp_path, restart=RestartConfig(max_retries=2), health_timeout_s=TIMEOUT_S,
                           command=[sys.executable, "-c", LOADING_SERVER])
    sup.start()
    shown: list[str] = []        # the status bar's texts meanwhile: the load's time moves
    try:
        deadline = time.monotonic() + 60
        while sup.status().state == "starting" and time.monotonic() < deadline:
            text = status_text(sup.status())
            if not shown or shown[-1] != text:
                shown.append(text)
            time.sleep(0.1)
        st = wait_state(sup, {"running", "restarting", "failed"}, timeout=60)
        seen = [text for _, text in sup.events]
    finally:
        sup.stop()
    assert st.state == "running" and st.restarts == 0, (st, seen)
    assert "starting: loading the model" in seen, seen      # the status bar said what the wait was for
    prefix = "Server starting: loading the model ("
    counted = [int(text.removeprefix(prefix).removesuffix(" s so far)")) for text in shown if text.startswith(prefix)]
    assert counted and counted[0] == 0 and counted == sorted(counted) and counted[-1] >= 1, shown
    assert status_text(st) == f"Server running (pid {st.pid})"
    assert not [text for text in seen if "answered nothing on /health" in text], seen


def test_a_server_that_never_answers_is_still_ended(tmp_path):
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    sup = ServerSupervisor(None, tmp_path, restart=RestartConfig(max_retries=1), health_timeout_s=TIMEOUT_S,
                           command=silent)
    sup.start()
    try:
        st = wait_state(sup, {"failed"}, timeout=60)
        seen = [text for _, text in sup.events]
    finally:
        sup.stop()
    assert st.restarts == 1
    assert f"answered nothing on /health for {TIMEOUT_S:.0f} s; killing the server" in seen, seen
    # said as the app's own doing: "server killed by SIGKILL" alone read as another program's (the OOM killer)
    assert f"server answered nothing on /health for {TIMEOUT_S:.0f} s (the app ended it)" in st.detail, st.detail
    assert "SIGKILL" not in st.detail, st.detail


def test_a_failed_loads_answer_is_not_waited_for_as_a_load(tmp_path):
    # /health's 503 "error" (the load failed) comes before the server's own exit with its reason; one that stayed
    # saying it is not shown as "loading the model" for ever
    failed = LOADING_SERVER.replace('b\'{"status": "loading"}\'', 'b\'{"status": "error", "error": "bad"}\'') \
        .replace(f"{LOAD_S}", "1e9")
    assert failed != LOADING_SERVER
    sup = ServerSupervisor(None, tmp_path, restart=RestartConfig(max_retries=0), health_timeout_s=TIMEOUT_S,
                           command=[sys.executable, "-c", failed])
    sup.start()
    try:
        st = wait_state(sup, {"failed", "running"}, timeout=60)
        seen = [text for _, text in sup.events]
    finally:
        sup.stop()
    assert st.state == "failed" and "answered nothing on /health" in st.detail, (st, seen)
    assert "starting: loading the model" not in seen, seen


@pytest.mark.parametrize(("answer", "silent_s", "state"), [
    ("ok", 0.0, "up"),
    ("ok", 500.0, "up"),
    ("loading", 0.0, "loading"),
    ("loading", 10_000.0, "loading"),     # answering: waited for however long the load takes
    (None, 0.0, "wait"),
    (None, 179.9, "wait"),
    (None, 180.0, "hung"),
])
def test_wait_for_health_table(answer, silent_s, state):
    assert wait_for_health(answer, silent_s, 180.0).state == state


@pytest.mark.parametrize(("answer", "timeout_s", "named"), [
    (None, 0.0, "health timeout 0.0"),
    (None, -5.0, "health timeout -5.0"),
    ("maybe", 180.0, "health answer 'maybe'"),
])
def test_wait_for_health_names_bad_input(answer, timeout_s, named):
    with pytest.raises(ValueError, match=named):
        wait_for_health(answer, 0.0, timeout_s)


@pytest.mark.parametrize(("s", "text"), [(0.4, "0 s"), (42.9, "42 s"), (59.99, "59 s"), (60.0, "1 min 00 s"),
                                         (185.0, "3 min 05 s")])
def test_loading_time(s, text):
    assert units.elapsed(s) == text


def test_the_status_bar_counts_the_load():
    st = ServerStatus("starting", "loading the model", "http://127.0.0.1:1", 7, 0, "", loading_s=185.2)
    assert status_text(st) == "Server starting: loading the model (3 min 05 s so far)"
    assert status_text(ServerStatus("starting", "starting the server", None, 7, 0, "")) == \
        "Server starting: starting the server"


# loads for CRASH_LOAD_S, serves, and exits with status 1 just after its first "ok" (a crash at its first work)
CRASH_LOAD_S = 3.0
CRASHING_SERVER = LOADING_SERVER.replace(f"+ {LOAD_S}", f"+ {CRASH_LOAD_S}").replace(
    "        self.wfile.write(body)\n",
    "        self.wfile.write(body)\n"
    "        if ok:\n"
    "            print('crashed at its first request', flush=True)\n"
    "            threading.Timer(0.3, lambda: __import__('os')._exit(1)).start()\n")


def test_a_crash_right_after_a_long_load_still_counts_as_a_crash_loop(tmp_path):
    # a run counts as stable (the retry count starts again) after stable_s of serving, not of loading and serving:
    # a load longer than stable_s (minutes, for a big model, since the app waits for every load) made each crash
    # just after it a new failure, and the app restarted the server (reading the model anew) for ever
    assert CRASHING_SERVER.count("_exit(1)") == 1 and f"+ {CRASH_LOAD_S}" in CRASHING_SERVER
    sup = ServerSupervisor(None, tmp_path, restart=RestartConfig(max_retries=1, stable_s=CRASH_LOAD_S - 1.0),
                           health_timeout_s=60.0, command=[sys.executable, "-c", CRASHING_SERVER])
    sup.start()
    try:
        deadline = time.monotonic() + 90
        while sup.status().state != "failed" and sup.status().restarts < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        st = sup.status()
        seen = [text for _, text in sup.events]
    finally:
        sup.stop()
    assert st.state == "failed" and st.restarts == 1, (st, seen)
    assert st.detail.startswith("gave up after 1 restart"), st.detail
    assert "crashed at its first request" in st.detail, st.detail


# says "loading" for ever and goes on loading when its input ends (the real server finishes its load first: it
# cannot be interrupted, server/cli.py); a SIGTERM ends it
STILL_LOADING_SERVER = LOADING_SERVER.replace(f"+ {LOAD_S}", "+ 1e9").replace(
    "sys.stdin.read()\n", "sys.stdin.read()\ntime.sleep(1e9)\n")


def test_a_quit_during_the_load_does_not_wait_for_a_stop_that_keeps_nothing(tmp_path):
    # a server still loading has served nothing and has nothing to keep: its stop is not waited for as a serving
    # one's is (the grace time, 15 s, for a stop that would only have waited for the load to end), as Quit or
    # Restart during a long load did; the grace here is far longer than the join's wait
    assert STILL_LOADING_SERVER.count("time.sleep(1e9)") == 1
    sup = ServerSupervisor(None, tmp_path, health_timeout_s=60.0, stop_grace_s=600.0, stop_cap_s=1200.0,
                           command=[sys.executable, "-c", STILL_LOADING_SERVER])
    sup.start()
    stopper = threading.Thread(target=sup.stop, daemon=True)
    try:
        deadline = time.monotonic() + 60
        while sup.status().loading_s is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sup.status().loading_s is not None, sup.status()
        stopper.start()
        stopper.join(60)
        stopped = not stopper.is_alive()
        seen = [text for _, text in sup.events]
    finally:
        if sup._proc is not None and sup._proc.poll() is None:
            sup._proc.kill()
        stopper.join(30) if stopper.is_alive() else None
    assert stopped, seen
    assert sup.status().state == "stopped"
    assert any("still loading its model" in text for text in seen), seen


@pytest.mark.parametrize(("loading", "wait"), [(False, True), (True, False)])
def test_wait_for_stop_of_a_server_still_loading(loading, wait):
    assert wait_for_stop(0.2, 0.2, 15.0, 600.0, loading=loading).wait is wait


# answers "loading" and falls silent by turns (drops the connection unanswered), then serves: never silent for as
# long as the health timeout at a stretch, though silent for longer than it in all
FLIPPING_SERVER = LOADING_SERVER.replace(
    "        ok = time.monotonic() >= ready_at\n",
    "        t = time.monotonic() - (ready_at - 5.2)\n"
    "        if 1.0 <= t < 2.2 or 3.0 <= t < 4.2:\n"
    "            self.close_connection = True\n"
    "            return\n"
    "        ok = t >= 5.2\n")


def test_a_server_silent_by_turns_during_its_load_is_not_ended(tmp_path):
    # loading -> silent -> loading: the silence is counted from the last answer, so two short silences (1.2 s each,
    # 2.4 s in all) under a 2.5 s timeout do not end it; counted from the first answer they would have
    assert FLIPPING_SERVER.count("close_connection") == 1
    sup = ServerSupervisor(None, tmp_path, restart=RestartConfig(max_retries=0), health_timeout_s=2.5,
                           command=[sys.executable, "-c", FLIPPING_SERVER])
    sup.start()
    try:
        st = wait_state(sup, {"running", "restarting", "failed"}, timeout=60)
        seen = [text for _, text in sup.events]
    finally:
        sup.stop()
    assert st.state == "running" and st.restarts == 0, (st, seen)
    assert "starting: loading the model" in seen, seen


def test_a_server_that_dies_during_its_load_counts_toward_giving_up(tmp_path):
    # STRATA_START_RETRIES still counts a server that ends while it loads (it never served): restarted with its
    # reason, then given up on, as a server that ends at once is
    dying = LOADING_SERVER.replace("sys.stdin.read()\n", "time.sleep(1.0)\nprint('out of memory while loading',"
                                   " flush=True)\nsys.exit(1)\n")
    assert dying != LOADING_SERVER
    sup = ServerSupervisor(None, tmp_path, restart=RestartConfig(max_retries=2), health_timeout_s=60.0,
                           command=[sys.executable, "-c", dying])
    sup.start()
    try:
        st = wait_state(sup, {"failed"}, timeout=90)
        seen = [text for _, text in sup.events]
    finally:
        sup.stop()
    assert st.restarts == 2 and st.detail.startswith("gave up after 2 restarts"), (st, seen)
    assert "out of memory while loading" in st.detail, st.detail
    assert seen.count("starting: loading the model") == 3, seen
