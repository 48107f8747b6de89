"""The app's server asks for the key given as one of the app's serve flags (`./run --api-key KEY`), and the app
reads its feed with that key: app/main.api_key_of read STRATA_API_KEY and the configuration file's api_key alone, so the
monitor feed answered 401, and the stop (43fe270: its wording from `GET /v1/monitor`'s `stop`) said a bare
"stopping the server" where the server would say what it keeps. The key is read as `strata serve` reads it
(app/model_file.configured_key): the flag over the variable over the file. A real server in a subprocess."""

from __future__ import annotations

import os
import time

import pytest
import tomli_w
import tomllib
from strata.app.model_file import configured_key
from strata.app.supervisor import ServerSupervisor, server_command

NOTHING_NEW = "stopping: stopping the server (no conversation to write: what it keeps is on disk already)"


def _with_file_key(app_config, key: str):
    values = tomllib.loads(app_config.read_text(encoding="utf-8"))
    values["api_key"] = key
    app_config.write_text(tomli_w.dumps(values), encoding="utf-8")
    return app_config


@pytest.mark.parametrize(("flags", "variable", "want"), [
    (("--api-key", "from-flag"), "from-variable", "from-flag"),
    (("--api-key=from-flag",), None, "from-flag"),
    ((), "from-variable", "from-variable"),
    ((), None, "from-file"),
])
def test_the_key_is_read_as_the_server_reads_it(app_config, monkeypatch, flags, variable, want):
    if variable is None:
        monkeypatch.delenv("STRATA_API_KEY", raising=False)
    else:
        monkeypatch.setenv("STRATA_API_KEY", variable)
    assert configured_key(_with_file_key(app_config, "from-file"), flags, os.environ) == want


def test_the_stop_reads_the_feed_with_the_key_given_as_a_flag(app_config, tmp_path, monkeypatch):
    monkeypatch.delenv("STRATA_API_KEY", raising=False)
    flags = ("--api-key", "the-flags-key")
    sup = ServerSupervisor(app_config, tmp_path / "logs", command=server_command(app_config, flags), options=flags,
                           api_key=configured_key(app_config, flags, os.environ))
    sup.start()
    try:
        deadline = time.monotonic() + 120
        while sup.status().state != "running":
            assert time.monotonic() < deadline and sup.status().state != "failed", (sup.status(), list(sup.events))
            time.sleep(0.05)
    finally:
        sup.stop()
    events = [text for _, text in sup.events]
    assert not [e for e in events if "without the server's feed" in e], events
    assert NOTHING_NEW in events, events


def test_a_key_changed_in_the_file_is_the_one_read_after_a_restart(qtbot, app_config, tmp_path, monkeypatch):
    """The key is read as each server starts, not once as the app starts: a key changed in the file, then Restart
    (or a configuration refused at the app's start, then mended), left the app asking with the old one (401: the
    window's feed refused, the stop's wording bare)."""
    from strata.app.controller import AppController

    monkeypatch.delenv("STRATA_API_KEY", raising=False)
    controller = AppController(_with_file_key(app_config, "first-key"), tmp_path / "logs", theme="light")
    controller.start(show=False)
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=120_000)
        first = controller.supervisor.status().pid
        _with_file_key(app_config, "second-key")
        controller.restart_server()
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running"
                        and controller.supervisor.status().pid != first, timeout=120_000)
        # the window's feed follows the new server with its key
        qtbot.waitUntil(lambda: controller.client is not None and controller.client.snapshots > 0, timeout=30_000)
        controller.quit()
        qtbot.waitUntil(lambda: controller._quit_thread is not None and not controller._quit_thread.is_alive(),
                        timeout=60_000)
    finally:
        controller.shutdown()
    events = [text for _, text in controller.supervisor.events]
    assert not [e for e in events if "without the server's feed" in e], events
    assert events.count(NOTHING_NEW) == 2, events
