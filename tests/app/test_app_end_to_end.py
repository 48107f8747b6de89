"""End to end: the app (offscreen) starts a real `strata serve` on a tiny model, four agents send
requests, the monitor shows them (slots, requests with their reuse and mismatch position, disk parks);
then the server is killed and the app restarts it and says so. Screenshots of the window at idle,
under load and after the restart go to test-artifacts/monitor/ for review."""

from __future__ import annotations

import logging
import os
import signal
import threading

import pytest
from strata.app.controller import AppController
from strata.app.restart_policy import RestartConfig
from strata.monitor.widgets.requests import REQUEST_HEADERS

from tests.monitor import traffic

pytestmark = pytest.mark.skipif(os.name == "nt", reason="kills the server with SIGKILL")


def test_app_runs_the_server_shows_traffic_and_restarts_it(qtbot, app_config, tmp_path, artifacts):
    controller = AppController(app_config, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=3))
    controller.window.resize(1280, 800)
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=90_000)
        status = controller.supervisor.status()
        assert status.endpoint and status.endpoint.startswith("http://127.0.0.1:")
        qtbot.waitUntil(lambda: controller.model.view().connection == "connected", timeout=20_000)
        qtbot.wait(600)
        controller.window.save_png(artifacts / "app-idle.png")
        assert "running" in controller.status_label.text()

        errors: list[BaseException] = []
        agents = threading.Thread(target=lambda: errors.extend(
            traffic.run_agents(status.endpoint, n=4, turns=6, max_tokens=64)))
        agents.start()
        qtbot.waitUntil(lambda: len(controller.model.view().requests) >= 6, timeout=60_000)
        controller.window.save_png(artifacts / "app-load.png")
        qtbot.waitUntil(lambda: not agents.is_alive(), timeout=300_000)
        assert errors == []
        qtbot.waitUntil(lambda: len(controller.model.view().requests) >= 24, timeout=10_000)
        qtbot.wait(600)
        view = controller.model.view()
        assert view.cache["parks"]["disk"] > 0                  # two slots, four conversations: parked to disk
        # each displaced conversation came back restored: from the cold level, or, where its write was still under
        # way (a slow disk: CI's, or STRATA_TEST_DISK_WRITE_DELAY_S=0.5 makes every one so), from the copy being
        # written, a RAM hit. Stop 44's CI saw 0 cold hits this way; the admissions say why when neither is seen
        hits = view.cache["hits"]
        assert hits["cold"] + hits["ram"] > 0, (hits, view.cache.get("admission"))
        # the agent that changes the top of its prompt ("time 0003. You are ...") shows up with an early
        # mismatch position; the excerpt starts at "time " when the closest history was another agent's,
        # at the turn's digits when it was its own previous turn (which one is in a slot then is timing)
        changing = [r for r in view.requests if r.get("mismatch_at") is not None and r["mismatch_at"] < 16]
        assert changing, [(r.get("mismatch_at"), r.get("mismatch_excerpt")) for r in view.requests]
        assert all(r["mismatch_excerpt"].startswith("time ") or r["mismatch_excerpt"][:1].isdigit()
                   for r in changing), [r["mismatch_excerpt"] for r in changing]
        table = controller.window.activity.requests
        assert table.rowCount() == len(view.requests)
        col = REQUEST_HEADERS.index("mismatch\nat token")
        shown = [table.item(r, col).text() for r in range(table.rowCount())]
        assert any(t[:1].isdigit() for t in shown)
        controller.window.save_png(artifacts / "app-after-load.png")

        pid = controller.supervisor.status().pid
        os.kill(pid, signal.SIGKILL)
        qtbot.waitUntil(lambda: controller.supervisor.status().restarts == 1
                        and controller.supervisor.status().state == "running", timeout=90_000)
        assert controller.supervisor.status().pid != pid
        qtbot.wait(2 * 300 + 100)
        text = controller.status_label.text()
        assert "restarted once" in text and "killed by SIGKILL" in text
        # the monitor follows the new process (its history starts again: request ids from 1)
        qtbot.waitUntil(lambda: controller.model.view().connection == "connected"
                        and controller.model.view().totals.get("requests") == 0, timeout=20_000)
        controller.window.save_png(artifacts / "app-restarted.png")
        log = (tmp_path / "logs" / "server.log").read_text(encoding="utf-8")
        assert log.count("---- ") == 2 and "listening on" in log
    finally:
        controller.shutdown()
    assert controller.supervisor.status().state == "stopped"
    assert controller.supervisor.status().pid is None


def test_a_refused_configuration_is_shown_and_not_retried(qtbot, tmp_path, caplog):
    config = tmp_path / "config.toml"
    config.write_text("ctx = 'many'\n", encoding="utf-8")
    controller = AppController(config, tmp_path / "logs", theme="light")
    controller.start()
    try:
        qtbot.waitUntil(lambda: "refused its configuration" in controller.status_label.text(), timeout=60_000)
        assert controller.supervisor.status().state == "failed"
        assert controller.supervisor.status().restarts == 0
        assert controller.status_label.text().startswith("Server failed:")
    finally:
        controller.shutdown()
    with caplog.at_level(logging.INFO, logger="strata.app"):
        controller.shutdown()                   # again, as main's `finally` does after lastWindowClosed
    assert [r for r in caplog.records if r.getMessage() == "stopped"] == []


def test_a_long_failure_reason_is_readable_in_a_window_that_fits_the_screen(qtbot, tmp_path):
    """A failure's reason ends with what to do (`fix the configuration file`, `download it again`,
    `--port chooses another`); a new-user trial saw it only in the status bar's one line, cut off at the
    window's right edge (1,695 px of text for a refused configuration, 4,293 px for a damaged model, in a
    1280-px window), while the header said "connecting" to no address."""
    config = tmp_path / "a folder with a rather long name for the configuration" / "config.toml"
    config.parent.mkdir()
    config.write_text("ctx = 'many'\n", encoding="utf-8")
    controller = AppController(config, tmp_path / "logs", theme="light")
    controller.window.resize(1280, 800)
    controller.start()
    try:
        qtbot.waitUntil(lambda: "refused its configuration" in controller.status_label.text(), timeout=60_000)
        qtbot.waitUntil(lambda: "server failed" in controller.window.header.state.text(), timeout=10_000)
        qtbot.wait(100)
        label, window = controller.status_label, controller.window
        assert label.fontMetrics().horizontalAdvance(label.text()) > 1280      # the case: longer than the window
        assert label.toolTip() == label.text()
        # the header says the server is down, not "connecting" to nowhere, with all of the reason, wrapped
        state = window.header.state
        assert "connecting" not in state.text()
        assert "server failed" in state.text() and state.text().endswith("(or run the setup again)")
        assert state.minimumSizeHint().width() <= state.width() and state.height() >= state.heightForWidth(state.width())
        # and the window still fits a 1366x768 screen
        assert window.width() == 1280 and window.minimumSizeHint().width() <= 1024
        assert window.height() <= 768 or window.minimumSizeHint().height() <= 740, window.minimumSizeHint()
    finally:
        controller.shutdown()
