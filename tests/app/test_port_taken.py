"""A port another program holds: the app says so at once, restarts nothing, and offers a way out that works,
a server on any free port. It retried the server 5 times (18 s, five "restarted" notifications) and gave up
with the server's terminal advice, '--port chooses another', which an app user has no terminal to give."""

from __future__ import annotations

import socket
import urllib.parse

import tomli_w
from PySide6.QtCore import Qt
from strata.app.controller import AppController
from strata.app.restart_policy import RestartConfig
from strata.installer.config_file import read


def test_a_taken_port_is_said_at_once_and_a_free_port_is_offered(qtbot, app_config, tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        values, _ = read(app_config)
        app_config.write_text(tomli_w.dumps({**values, "port": taken}), encoding="utf-8")
        controller = AppController(app_config, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=3))
        controller.start()
        try:
            qtbot.waitUntil(lambda: controller.supervisor.status().state == "failed", timeout=60_000)
            status = controller.supervisor.status()
            assert status.restarts == 0, status          # the same address fails again: not retried
            assert f"cannot listen on 127.0.0.1:{taken}: Address already in use" in status.detail
            assert "--port" not in status.detail, status.detail    # the server's advice to a terminal, dropped
            assert f"set another `port` in the configuration file {app_config} (0: any free port)" in status.detail
            qtbot.waitUntil(lambda: not controller.free_port_button.isHidden(), timeout=10_000)
            qtbot.waitUntil(lambda: "server failed" in controller.window.header.state.text(), timeout=10_000)
            header = controller.window.header           # no address was ever said: none to try or copy ("trying -")
            assert header.endpoint.isHidden() and header.copy.isHidden()

            qtbot.mouseClick(controller.free_port_button, Qt.MouseButton.LeftButton)
            qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=90_000)
            endpoint = controller.supervisor.status().endpoint
            assert urllib.parse.urlsplit(endpoint).port not in (taken, None), endpoint
            qtbot.waitUntil(lambda: controller.model.view().connection == "connected", timeout=20_000)
            qtbot.waitUntil(lambda: "running" in controller.status_label.text(), timeout=10_000)
            assert controller.free_port_button.isHidden()
            qtbot.waitUntil(lambda: not header.copy.isHidden() and endpoint in header.endpoint.text(),
                            timeout=10_000)           # the header's own redraw timer (250 ms)
            assert controller.supervisor.status().restarts == 0
        finally:
            controller.shutdown()
    assert controller.supervisor.status().state == "stopped"
