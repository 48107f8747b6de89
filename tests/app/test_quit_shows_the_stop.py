"""Quit stops the server off the GUI thread: the status bar shows the server's progress lines while it writes
its conversations ("Server stopping: keeping ... written"), and the app ends once the server has. Before, Quit
stopped the server on the GUI thread with the poll timer off: the window froze, saying nothing, for as long as
the stop took (a big model's: a minute or more)."""

from __future__ import annotations

import logging
import sys

from strata.app.controller import AppController, status_text
from strata.app.supervisor import ServerStatus

# a server as the app sees it: at the end of its input it says how far its stop is, twice, then ends
SERVER = ("import sys, time\n"
          "print('ready', flush=True)\n"
          "sys.stdin.read()\n"
          "print('2026-12-04 20:00:00,000 INFO strata.server: stopping: keeping 2 conversations for the next start "
          "(0.0 of 2.0 MiB written)', flush=True)\n"
          "time.sleep(1.5)\n"
          "print('stopping: keeping 2 conversations for the next start (1.0 of 2.0 MiB written)', flush=True)\n"
          "time.sleep(1.5)\n"
          "print('stopped; kept for the next start: cold', flush=True)\n")


def counting_starts(qtbot, tmp_path):
    """The app on SERVER, each start of which writes a line to the returned file; once the first is ready."""
    starts = tmp_path / "starts"
    server = f"open({str(starts)!r}, 'a').write('s\\n')\n" + SERVER
    controller = AppController(None, tmp_path / "logs", theme="light", command=[sys.executable, "-c", server])
    controller.start(show=True)
    log = tmp_path / "logs" / "server.log"
    qtbot.waitUntil(lambda: log.is_file() and "ready" in log.read_text(), timeout=60_000)
    return controller, starts


def test_quit_shows_the_stop_in_the_status_bar_and_ends_when_the_server_has(qtbot, tmp_path):
    controller = AppController(None, tmp_path / "logs", theme="light", command=[sys.executable, "-c", SERVER])
    controller.start(show=True)
    qtbot.waitUntil(lambda: controller.supervisor.status().pid is not None, timeout=60_000)
    log = tmp_path / "logs" / "server.log"
    qtbot.waitUntil(lambda: log.is_file() and "ready" in log.read_text(), timeout=60_000)
    shown: list[str] = []
    controller.quit()
    assert controller.supervisor.status().pid is not None      # returned at once: the server is still stopping

    def seen():
        text = controller.status_label.text()
        if not shown or shown[-1] != text:
            shown.append(text)
        return "1.0 of 2.0 MiB written" in text
    qtbot.waitUntil(seen, timeout=60_000)
    qtbot.waitUntil(lambda: controller._shut, timeout=60_000)
    assert controller.supervisor.status().state == "stopped"
    assert "Server stopping: keeping 2 conversations for the next start (1.0 of 2.0 MiB written)" in shown, shown


def test_the_status_bar_says_a_progress_line_once():
    st = ServerStatus("stopping", "stopping: keeping 1 conversation for the next start (3 of 5 written)", None, 7, 0, "")
    assert status_text(st) == "Server stopping: keeping 1 conversation for the next start (3 of 5 written)"
    st = ServerStatus("stopping", "stopping the server (its conversations are not kept: no disk level is on)", None, 7,
                      0, "")
    assert status_text(st) == "Server stopping: stopping the server (its conversations are not kept: no disk level is on)"


def test_a_restart_asked_for_while_quitting_starts_no_server(qtbot, tmp_path):
    """The tray's Restart (or 'Start on a free port') clicked during Quit's stop: it restarted the server, which
    loaded its model only to be stopped again by the shutdown, with the window frozen for that second stop."""
    controller, starts = counting_starts(qtbot, tmp_path)
    controller.quit()
    controller.restart_server()
    controller.restart_on_free_port()
    qtbot.waitUntil(lambda: controller._shut, timeout=60_000)
    assert starts.read_text().count("s") == 1
    assert not controller.supervisor.on_free_port


def test_the_header_says_the_server_is_being_stopped_not_to_start_one(qtbot, tmp_path, tiny_model_factory,
                                                                       monkeypatch):
    """A real server whose stop writes its conversations slowly: the monitor's header said 'disconnected -
    cannot reach ...: Connection refused (no server listens there: start one with `strata serve` or ./run)'
    for the whole stop, advice for `strata monitor` alone, and a command the packaged app does not have.
    Now it says what the app waits for, with the server's progress; a Restart's new server is followed."""
    import openai
    import tomli_w

    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)
    config = tmp_path / "config.toml"
    config.write_text(tomli_w.dumps({
        "model": str(model), "port": 0, "batch": 2, "ctx": 1024, "threads": 1, "conversation_cache_park": "ram",
        "conversation_cache_mib": 256, "conversation_cache_min_free_mib": 0, "conversation_cache_park_min_free_mib": 0,
        "conversation_cache_cold_dir": str(tmp_path / "cold"), "conversation_cache_cold_mib": 256,
        "conversation_cache_segment_mib": 0, "conversation_cache_system_prompt_mib": 0}), encoding="utf-8")
    monkeypatch.setenv("STRATA_TEST_DISK_WRITE_DELAY_S", "0.4")
    controller = AppController(config, tmp_path / "logs", theme="light")
    controller.start(show=True)
    header = controller.window.header.state
    seen: list[str] = []

    def saw(text: str):
        def check():
            if not seen or seen[-1] != header.text():
                seen.append(header.text())
            return text in header.text()
        return check

    try:
        # the feed answers while the model loads (a chat then is a 503, once in a loaded run): running is loaded
        qtbot.waitUntil(lambda: controller.model.view().connection == "connected"
                        and controller.supervisor.status().state == "running", timeout=90_000)
        client = openai.OpenAI(base_url=controller.supervisor.status().endpoint + "/v1", api_key="x", timeout=60)
        for i in range(4):
            client.chat.completions.create(model="m", max_tokens=2, messages=[
                {"role": "user", "content": f"conversation {i}: " + "tell me about the sea " * 20}])
        controller.restart_server()
        qtbot.waitUntil(saw("for the server to stop"), timeout=60_000)
        qtbot.waitUntil(lambda: controller.model.view().connection == "connected"
                        and controller.supervisor.status().state == "running", timeout=90_000)
        client = openai.OpenAI(base_url=controller.supervisor.status().endpoint + "/v1", api_key="x", timeout=60)
        client.chat.completions.create(model="m", max_tokens=2, messages=[{"role": "user", "content": "again " * 40}])
        controller.quit()
        qtbot.waitUntil(saw(" written)"), timeout=60_000)
        qtbot.waitUntil(lambda: saw("\x00")() or controller._shut, timeout=60_000)
    finally:
        controller.shutdown()
    assert any("waiting</b> for the server to stop: keeping" in text for text in seen), seen
    advice = [text for text in seen if "strata serve" in text or "cannot reach" in text]
    assert not advice, (advice, seen)


def test_quit_during_a_restarts_stop_starts_no_server(qtbot, tmp_path):
    """Restart clicked, then Quit (or the window closed without a tray) while that restart's stop is under way:
    the quit waited for the restart, which started a new server after its stop, and then stopped that one too
    (a big model loaded only to be stopped, the app meanwhile 'starting'). The restart's start is not made."""
    controller, starts = counting_starts(qtbot, tmp_path)
    controller.restart_server()
    qtbot.waitUntil(lambda: controller.supervisor.status().state == "stopping", timeout=60_000)
    controller.quit()
    qtbot.waitUntil(lambda: controller._shut, timeout=60_000)
    assert starts.read_text().count("s") == 1


# a server that says where it listens once the file named by its first argument exists (nothing listens on port
# 9: no feed could connect there), then runs until the end of its input
LISTENS_WHEN_TOLD = ("import os, sys, time\n"
                     "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
                     "print('listening on http://127.0.0.1:9', flush=True)\n"
                     "sys.stdin.read()\n")


def test_a_restart_follows_no_server_until_the_new_one_says_where_it_listens(qtbot, tmp_path):
    """61a9eb9 stopped following the server a Restart stops by its pid; once that pid was gone (the old server
    ended, the new one not yet spawned: the model file looked at) the next poll made a feed client for the OLD
    address, and the header read 'disconnected - cannot reach ...' through the new server's model load. Keyed by
    pid it could also never follow a new server that got the old one's pid back. The app follows the server of a
    later start, from the address that server gives."""
    import threading

    go = tmp_path / "go"
    go.touch()
    controller = AppController(None, tmp_path / "logs", theme="light",
                               command=[sys.executable, "-c", LISTENS_WHEN_TOLD, str(go)])
    look = controller.supervisor.model_probe
    armed, looking, released = threading.Event(), threading.Event(), threading.Event()

    def probe(env):                 # holds the restart's look at the model file until the test has polled
        if armed.is_set():
            looking.set()
            released.wait(60)
        return look(env)

    controller.supervisor.model_probe = probe
    controller.start(show=True)
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().endpoint is not None, timeout=60_000)
        controller.poll()
        assert controller.client is not None          # the first server is followed
        go.unlink()
        armed.set()
        controller.restart_server()
        qtbot.waitUntil(looking.is_set, timeout=60_000)
        status = controller.supervisor.status()
        # said starting as the restart begins (fe755fb), with no server to follow until the new one listens
        assert (status.state, status.pid) == ("starting", None), list(controller.supervisor.events)
        controller.poll()
        assert controller.client is None, controller.client.base
        assert (controller.model.view().connection, controller.model.view().connection_detail) == ("connecting",
                                                                                         "starting the server")
        armed.clear()
        released.set()
        # the new server spawned, not listening yet: the header says it is starting, and no feed follows yet
        qtbot.waitUntil(lambda: controller.supervisor.status().pid is not None, timeout=60_000)
        controller.poll()
        assert controller.client is None
        assert (controller.model.view().connection, controller.model.view().connection_detail) == ("connecting",
                                                                                         "starting the server")
        go.touch()
        qtbot.waitUntil(lambda: controller.client is not None, timeout=60_000)
        assert controller.client.base == "http://127.0.0.1:9"
    finally:
        armed.clear()
        released.set()
        controller.shutdown()


def test_a_second_launch_during_quit_is_told_to_wait(qtbot, tmp_path, caplog):
    """The window comes forward for a second launch until Quit begins; from then on the answer is "quitting"
    (single_instance.py: the launch waits for this app to end and starts then), said once in app.log."""
    caplog.set_level(logging.INFO, logger="strata.app")
    controller, _ = counting_starts(qtbot, tmp_path)
    assert controller.activate() is True and controller.window.isVisible()
    controller.quit()
    assert controller.activate() is False and controller.activate() is False
    qtbot.waitUntil(lambda: controller._shut, timeout=60_000)
    assert controller.activate() is False
    said = [r.getMessage() for r in caplog.records if "second launch" in r.getMessage()]
    assert said == ["a second launch is waiting for this app to end"], said
