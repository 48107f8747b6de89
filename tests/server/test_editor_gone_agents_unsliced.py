"""An editor that went away stops affecting the agents' prompts: once no code completion waits or runs and the last
came more than EDITOR_ACTIVE_S ago, a prompt read alone goes in --prefill-chunk pieces again (a large model on the
CPU reads small pieces at a poorer rate), and one read with no editor ever seen was never sliced. The server runs
with --solo-slice-ms 0: where there are slots, a prompt read alone is otherwise cut into solo slices (session 33). A live server
(real engine and scheduler, tiny model with Qwen2.5-Coder's FIM tokens), each prompt token 1 ms slower and every
prompt piece recorded (test_infill_prompt_time.TokenTimedEngine); EDITOR_ACTIVE_S shortened to 2 s."""

from __future__ import annotations

import time

import pytest
import requests
from strata.server import scheduler as scheduler_module

from tests.server.live import LiveServer
from tests.server.test_infill_prompt_time import infill, timed_fim_server

LONG_PROMPT = "".join(f"row_{i} = table[{i}] * {i}\n" for i in range(90))      # ~2,000 tokens, not code FIM


@pytest.fixture
def timed_server(tiny_model_factory, tmp_path, monkeypatch):
    monkeypatch.setattr(scheduler_module, "EDITOR_ACTIVE_S", 2.0)
    with timed_fim_server(tiny_model_factory, tmp_path) as pair:
        yield pair


def read_alone(server: LiveServer, prompt: str) -> None:
    r = requests.post(server.url + "/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 1},
                      timeout=60)
    assert r.status_code == 200, r.text


def test_an_agent_alone_is_not_sliced_and_is_again_once_the_editor_went_away(timed_server):
    server, spy = timed_server
    read_alone(server, "x = 1\n" * 150)                        # the prefill rate measured
    assert server.state.scheduler.prefill_rate > 0
    spy.pieces.clear()
    read_alone(server, LONG_PROMPT)                            # no editor ever: one --prefill-chunk piece
    assert max(spy.pieces) > 1000
    first, _ = infill(server, t_max_prompt_ms=300)             # the user types
    assert first["tokens_predicted"] == 0
    spy.pieces.clear()
    read_alone(server, "# v2\n" + LONG_PROMPT)                 # within EDITOR_ACTIVE_S: slices (its first, at least)
    assert spy.pieces[0] <= 400
    time.sleep(2.2)                                            # the editor went away (its window closed)
    spy.pieces.clear()
    read_alone(server, "# v3\n" + LONG_PROMPT)
    assert max(spy.pieces) > 1000                              # whole pieces again
