"""A server whose configuration asks for a quiet log (`log_level = "warning"`) under the app: the app reads the
server's own INFO lines (where it listens, how far its stop is), so under --stop-on-stdin-eof they are still
written. Before, the app never learned the address (no answer on /health, killed after the health timeout and
started again) and a slow stop said nothing, so it was ended after the grace time with its conversations lost."""

from __future__ import annotations

import os

import openai
import pytest
import tomli_w
from strata.app.supervisor import ServerSupervisor

from tests.app.test_slow_stop import N_CONVERSATIONS, stop_watched
from tests.app.test_supervisor import wait_state


def test_a_warning_log_level_still_tells_the_app_where_and_how_far(tmp_path, tiny_model_factory):
    model = tiny_model_factory(ctx_len=4096, n_vocab=512, seed=3)
    values = {"model": str(model), "host": "127.0.0.1", "port": 0, "batch": 2, "ctx": 1024, "threads": 1,
              "log_level": "warning", "conversation_cache_park": "ram", "conversation_cache_mib": 256,
              "conversation_cache_min_free_mib": 0, "conversation_cache_park_min_free_mib": 0,
              "conversation_cache_cold_dir": str(tmp_path / "cold"), "conversation_cache_cold_mib": 256,
              "conversation_cache_segment_mib": 0, "conversation_cache_system_prompt_mib": 0}
    config = tmp_path / "config.toml"
    config.write_text(tomli_w.dumps(values), encoding="utf-8")
    env = dict(os.environ, STRATA_TEST_DISK_WRITE_DELAY_S="0.7")
    sup = ServerSupervisor(config, tmp_path / "logs", env=env, stop_grace_s=5.0, health_timeout_s=60)
    sup.start()
    st = wait_state(sup, {"running", "failed", "restarting"}, timeout=90)
    assert st.state == "running" and st.endpoint, (st, list(sup.events))
    client = openai.OpenAI(base_url=st.endpoint + "/v1", api_key="x", timeout=60)
    for i in range(N_CONVERSATIONS):
        client.chat.completions.create(model="m", max_tokens=2, messages=[
            {"role": "user", "content": f"conversation {i}: " + "tell me about the sea " * 20}])
    took, details = stop_watched(sup)
    log = (tmp_path / "logs" / "server.log").read_text()
    assert took > 5.0, f"the stop was not slow ({took:.1f} s): the test shows nothing"
    assert not any("said nothing of its stop" in text for _, text in sup.events), list(sup.events)
    assert "stopped; kept for the next start" in log, log[-3000:]
    assert any(d.startswith("stopping: keeping") for d in details), details


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
