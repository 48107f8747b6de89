"""The app's server asks for the key given as one of the app's serve flags (`./run --api-key KEY`), and the app
reads its feed with that key: api_key_of read STRATA_API_KEY and the configuration file's api_key alone, so the
monitor feed answered 401, and the stop (43fe270: its wording from `GET /v1/monitor`'s `stop`) said a bare
"stopping the server" where the server would say what it keeps. The key is read as `strata serve` reads it
(app/model_file.configured): the flag over the variable over the file. A real server in a subprocess."""

from __future__ import annotations

import time

import pytest
import tomli_w
import tomllib
from strata.app.main import api_key_of
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
    assert api_key_of(_with_file_key(app_config, "from-file"), flags) == want


def test_the_stop_reads_the_feed_with_the_key_given_as_a_flag(app_config, tmp_path, monkeypatch):
    monkeypatch.delenv("STRATA_API_KEY", raising=False)
    flags = ("--api-key", "the-flags-key")
    sup = ServerSupervisor(app_config, tmp_path / "logs", command=server_command(app_config, flags), options=flags,
                           api_key=api_key_of(app_config, flags))
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
