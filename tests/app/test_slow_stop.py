"""A stop that takes long for real: the server's disk writes are slowed (STRATA_TEST_DISK_WRITE_DELAY_S, a
sleep before each write) while it writes its RAM level's conversations to its cold folder at a clean stop.
The supervisor waits while the server says how far it is ("stopping: keeping N conversations ... written"),
and ends it once it goes quiet for the grace time. Before, SIGTERM came `stop_grace_s` after its standard input
closed whatever the server was doing, and the conversations not yet written were lost (a big model's take
~46 s, the grace was 15 s)."""

from __future__ import annotations

import os
import threading
import time

import openai
import pytest
import tomli_w
from strata.app.supervisor import ServerSupervisor

from tests.app.test_supervisor import wait_state

N_CONVERSATIONS = 6


def slow_server(tmp_path, tiny_model_factory, delay_s: float, grace_s: float, park: str = "ram") -> ServerSupervisor:
    """A running supervised server with N_CONVERSATIONS histories in its RAM level (or its contexts), every
    disk write `delay_s` late."""
    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)
    values = {"model": str(model), "host": "127.0.0.1", "port": 0, "batch": 2, "ctx": 1024, "threads": 1,
              "conversation_cache_park": park, "conversation_cache_mib": 256,
              "conversation_cache_min_free_mib": 0, "conversation_cache_park_min_free_mib": 0,
              "conversation_cache_cold_dir": str(tmp_path / "cold"), "conversation_cache_cold_mib": 256,
              "conversation_cache_segment_mib": 0, "conversation_cache_system_prompt_mib": 0}
    config = tmp_path / "config.toml"
    config.write_text(tomli_w.dumps(values), encoding="utf-8")
    env = dict(os.environ, STRATA_TEST_DISK_WRITE_DELAY_S=str(delay_s))
    sup = ServerSupervisor(config, tmp_path / "logs", env=env, stop_grace_s=grace_s)
    sup.start()
    st = wait_state(sup, {"running", "failed"}, timeout=90)
    assert st.state == "running", st.detail
    client = openai.OpenAI(base_url=st.endpoint + "/v1", api_key="x", timeout=60)
    for i in range(N_CONVERSATIONS):
        client.chat.completions.create(model="m", max_tokens=2, messages=[
            {"role": "user", "content": f"conversation {i}: " + "tell me about the sea " * 20}])
    return sup


def stop_watched(sup: ServerSupervisor) -> tuple[float, list[str]]:
    """Stops the server; (seconds the stop took, every distinct detail the state "stopping" showed)."""
    details: list[str] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            st = sup.status()
            if st.state == "stopping" and (not details or details[-1] != st.detail):
                details.append(st.detail)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    sup.stop()
    took = time.monotonic() - t0
    done.set()
    watcher.join()
    return took, details


@pytest.mark.parametrize("park", ["ram", "disk"])   # disk: the spill writer's queue is what the stop waits for
def test_a_stop_that_keeps_saying_how_far_it_is_is_waited_for(tmp_path, tiny_model_factory, park):
    sup = slow_server(tmp_path, tiny_model_factory, delay_s=0.7, grace_s=5.0, park=park)
    took, details = stop_watched(sup)
    log = (tmp_path / "logs" / "server.log").read_text()
    assert took > 5.0, f"the stop was not slow ({took:.1f} s): the test shows nothing"
    assert "stopped; kept for the next start" in log, log[-3000:]
    assert not any("said nothing of its stop" in text for _, text in sup.events), list(sup.events)
    written = [d for d in details if d.startswith("stopping: keeping")]
    assert len(written) >= 2, details
    assert written[-1].endswith(" written)"), written
    assert len(list((tmp_path / "cold").rglob("*.json"))) >= N_CONVERSATIONS - 1, \
        sorted(p.name for p in (tmp_path / "cold").rglob("*"))


def test_a_stop_gone_quiet_is_ended_after_the_grace_time(tmp_path, tiny_model_factory):
    sup = slow_server(tmp_path, tiny_model_factory, delay_s=60.0, grace_s=3.0)
    took, details = stop_watched(sup)
    log = (tmp_path / "logs" / "server.log").read_text()
    assert took < 30, took           # grace 3 s + SIGTERM's 5 s: not the 60 s the first write waits
    assert "stopped; kept" not in log
    assert any("said nothing of its stop for 3 s" in text for _, text in sup.events), list(sup.events)
    assert any(d.startswith("stopping: keeping") for d in details), details


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
