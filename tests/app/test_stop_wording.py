"""What the status bar says while the app stops a server (a new-user trial): it said "it parks its conversations
first" for every stop, also for a server with no disk level (nothing is kept) and one stopped during its load. The
wording then came from parsing the server's INFO line, which any rewording of that line broke; it comes from the
server's monitor feed now (`GET /v1/monitor`'s `stop`: a disk level on, how many conversations the stop would write).
Real servers in subprocesses, the real app in a real Qt (offscreen), the real OpenAI SDK."""

from __future__ import annotations

import json
import re
import shutil
import time
import urllib.request
from pathlib import Path

import pytest
import tomli_w
import tomllib
from strata.app.stop_wording import StopOutlook, read_outlook, stopping_detail
from strata.app.supervisor import ServerSupervisor, server_command

pytest.importorskip("PySide6")
from strata.app.controller import AppController  # noqa: E402

from tests.app.shown import follow  # noqa: E402

SMALL = ("--no-config", "--port", "0", "--batch", "0", "--ctx", "512")
WRITES_ONE = "stopping the server (it writes 1 conversation to disk first, for the next start)"
NOT_KEPT = "stopping the server (its conversations are not kept: no disk level is on)"


def _feed_stop(endpoint: str) -> dict:
    with urllib.request.urlopen(endpoint + "/v1/monitor", timeout=30) as r:
        return json.loads(r.read())["stop"]


def _app_config(app_config: Path, disk: bool) -> Path:
    """tests/app/conftest.py's configuration (a cold level, park target disk), or the same without a disk level."""
    if disk:
        return app_config
    values = tomllib.loads(app_config.read_text(encoding="utf-8"))
    del values["conversation_cache_cold_dir"], values["conversation_cache_cold_mib"]
    values["conversation_cache_park"] = "ram"
    app_config.write_text(tomli_w.dumps(values), encoding="utf-8")
    return app_config


@pytest.mark.parametrize(("disk", "said", "outlook"), [
    (True, WRITES_ONE, {"keeps_on_disk": True, "conversations": 1}),
    (False, NOT_KEPT, {"keeps_on_disk": False, "conversations": 0}),
], ids=["cold-level", "no-disk-level"])
def test_the_apps_stop_says_what_the_server_keeps(qtbot, app_config, tmp_path, artifacts, monkeypatch, disk, said,
                                                  outlook):
    import openai

    monkeypatch.setenv("STRATA_TEST_DISK_WRITE_DELAY_S", "0.4")   # the stop's writes long enough to be seen
    controller = AppController(_app_config(app_config, disk), tmp_path / "logs", theme="light")
    controller.start(show=True)
    try:
        qtbot.waitUntil(lambda: controller.supervisor.status().state == "running", timeout=120_000)
        endpoint = controller.supervisor.status().endpoint
        assert _feed_stop(endpoint) == {"keeps_on_disk": disk, "conversations": 0}
        client = openai.OpenAI(base_url=endpoint + "/v1", api_key="x", timeout=60)
        client.chat.completions.create(model="m", max_tokens=2, messages=[{"role": "user", "content": "the sea " * 30}])
        assert _feed_stop(endpoint) == outlook
        controller.quit()
        shown = [s.status for s in follow(controller, lambda s: said in s.status)]
        shot = artifacts / f"app-stop-wording-{'cold' if disk else 'no-disk'}.png"
        controller.window.save_png(shot)     # drawn as shown now (its header too)
        shutil.copy(shot, tmp_path / shot.name)
        controller.timer.start()
        qtbot.waitUntil(lambda: controller._shut, timeout=60_000)
    finally:
        controller.shutdown()
    assert f"Server stopping: {said}" in shown, shown
    events = [text for _, text in controller.supervisor.events]
    assert not [e for e in events if "without the server's feed" in e], events
    if disk:       # the server's own lines follow, with what it kept
        assert "stopping: keeping 1 conversation for the next start" in (tmp_path / "logs" / "server.log").read_text()


def test_a_server_stopped_during_its_load_says_there_is_nothing_to_keep(tmp_path):
    sup = ServerSupervisor(None, tmp_path / "logs", command=server_command(None, SMALL))
    sup.start()
    try:
        deadline = time.monotonic() + 60
        while sup.status().pid is None:
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.01)
    finally:
        sup.stop()
    said = [text for _, text in sup.events if text.startswith("stopping: ")]
    assert said and said[0] == "stopping: stopping the server while it loads its model (nothing served yet: nothing " \
                               "to keep)", list(sup.events)


@pytest.mark.parametrize(("loaded", "outlook", "said"), [
    (False, StopOutlook(True, 3), "stopping the server while it loads its model (nothing served yet: nothing to keep)"),
    (True, None, "stopping the server"),
    (True, StopOutlook(False, 0), NOT_KEPT),
    (True, StopOutlook(True, 0), "stopping the server (no conversation to write: what it keeps is on disk already)"),
    (True, StopOutlook(True, 1), WRITES_ONE),
    (True, StopOutlook(True, 4), "stopping the server (it writes up to 4 conversations to disk first, for the next "
                                 "start)"),
])
def test_stopping_detail(loaded, outlook, said):
    assert stopping_detail(loaded, outlook) == said


def test_the_feeds_stop_read():
    assert read_outlook({"stop": {"keeps_on_disk": True, "conversations": 2}, "ready": True}) == StopOutlook(True, 2)


@pytest.mark.parametrize(("feed", "named"), [
    ({"ready": False}, "'stop' is not an object: None"),
    ([], "'stop' is not an object: None"),
    ({"stop": {"keeps_on_disk": "yes", "conversations": 1}}, "keeps_on_disk is not true or false: 'yes'"),
    ({"stop": {"keeps_on_disk": True, "conversations": -1}}, "conversations is not a whole number >= 0: -1"),
    ({"stop": {"keeps_on_disk": True, "conversations": 1.5}}, "conversations is not a whole number >= 0: 1.5"),
    ({"stop": {"keeps_on_disk": True, "conversations": True}}, "conversations is not a whole number >= 0: True"),
])
def test_the_feeds_stop_named_when_bad(feed, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        read_outlook(feed)
