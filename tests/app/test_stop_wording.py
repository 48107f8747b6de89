"""What the status bar says while the app stops a server (a new-user trial): it said "it parks its conversations
first" for every stop, also for a server with no disk level (nothing is kept) and one stopped during its load. Real
servers (the default model) under the supervisor, and the INFO lines the server writes."""

from __future__ import annotations

import time

from strata.app.stop_wording import keeps_on_disk, stopping_detail
from strata.app.supervisor import ServerSupervisor, server_command

from tests.app.test_supervisor import wait_state

SMALL = ("--no-config", "--port", "0", "--batch", "0", "--ctx", "512")


def _stop_said(tmp_path, extra=(), loaded=True) -> str:
    """The supervisor's first 'stopping' detail for a real server started with `extra`, stopped once it serves
    (`loaded`) or as soon as its process runs."""
    sup = ServerSupervisor(None, tmp_path / "logs", command=server_command(None, SMALL + tuple(extra)))
    sup.start()
    try:
        if loaded:
            wait_state(sup, {"running"}, timeout=120)
        else:
            deadline = time.monotonic() + 60
            while sup.status().pid is None:
                assert time.monotonic() < deadline, "the server never started"
                time.sleep(0.01)
    finally:
        sup.stop()
    said = [text for _, text in sup.events if text.startswith("stopping: ")]
    assert said, list(sup.events)
    return said[0].removeprefix("stopping: ")


def test_a_server_without_a_disk_level_says_nothing_is_kept(tmp_path):
    assert _stop_said(tmp_path) == "stopping the server (its conversations are not kept: no disk level is on)"


def test_a_server_with_a_cold_level_writes_its_conversations_first(tmp_path):
    cold = ("--conversation-cache-cold-dir", str(tmp_path / "cold"), "--conversation-cache-cold-mib", "64")
    assert _stop_said(tmp_path, cold) == ("stopping the server (it writes its conversations to disk first, for the "
                                          "next start)")


def test_a_server_stopped_during_its_load_says_there_is_nothing_to_keep(tmp_path):
    said = _stop_said(tmp_path, loaded=False)
    assert said == "stopping the server while it loads its model (nothing served yet: nothing to keep)", said


def test_the_info_lines_levels():
    head = "strata: model m (llama) | backend cpu-avx2, 2 threads | "
    tail = " | listening on http://127.0.0.1:8080"
    assert keeps_on_disk(head + "conversation cache: park target ram; ram 8192 MiB on (0 entries); warm off; "
                                "cold off; segment off; system-prompt cache off; sessions /s 0.0 MiB used, no limit"
                         + tail) is False
    assert keeps_on_disk(head + "conversation cache: park target cold; ram 512 MiB on (0 entries); warm off; "
                                "cold /c 64 MiB on (2 entries); segment off" + tail) is True
    assert keeps_on_disk(head + "conversation cache off" + tail) is False
    assert keeps_on_disk("listening on http://127.0.0.1:8080 (loading the model)") is None
    assert stopping_detail(True, None) == "stopping the server"
