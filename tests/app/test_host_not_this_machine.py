"""A `host` in the configuration that is not an address of this machine: the app says to set `host` and offers
no free port. A new-user trial (session 28) gave the app `host = "10.9.9.9"`: it said to end the program that holds
the port, or set another `port`, or start it on a free port now (a button), all of which fail the same way, with
the server's terminal advice ('--host takes ...') in brackets. A real `strata serve` on the tiny model."""

from __future__ import annotations

import tomli_w
from strata.app.controller import AppController
from strata.app.restart_policy import RestartConfig
from strata.installer.config_file import read


def test_a_host_that_is_not_this_machines_says_to_set_host(qtbot, app_config, tmp_path):
    values, _ = read(app_config)
    app_config.write_text(tomli_w.dumps({**values, "host": "192.0.2.1"}), encoding="utf-8")   # TEST-NET-1
    controller = AppController(app_config, tmp_path / "logs", theme="light", restart=RestartConfig(max_retries=3))
    controller.start()
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "failed", timeout=60_000)
        status = controller.supervisor.status()
        assert status.restarts == 0, status
        assert "cannot listen on 192.0.2.1:" in status.detail, status.detail
        assert (f"`host` is not an address of this machine: set it in the configuration file {app_config} to "
                "127.0.0.1 (this machine only) or 0.0.0.0 (every interface), then restart the server") in status.detail
        assert "free port" not in status.detail and "--host" not in status.detail, status.detail
        qtbot.wait(2 * 300 + 100)
        assert controller.free_port_button.isHidden()
        assert "`host` is not an address of this machine" in controller.window.header.state.text()
    finally:
        controller.shutdown()
