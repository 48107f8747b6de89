"""An editor's code completions leave main (the solo path) to the agent's conversation: a completion runs in a
slot even when nothing else runs, and an agent's request beside completions only still counts as alone and runs
in main. Before, a completion typed while the agent waited took main and displaced its history at each keystroke,
and with a completion running or waiting nearly all the time (one every 1-2 s) the agents' requests were never
alone: in a 19-minute agent soak with an editor 29 of 399 agent requests ran on main (232 of 579 a day before,
without the editor), and 212 gave another agent's slot history up to the cache (80).

Real server: a tiny model with fill-in-the-middle tokens, --batch 4, --ctx 4096, slots of 2,048 tokens; the
completion beside the agent made slow (20 ms a token) so that it runs while the agent's request is placed."""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer
from tests.server.test_session_waits_for_idle import _SlowTokens, _wait_for

CODE = "def step(self, x):\n    return self.layer(x) + x\n" * 12
WORDS = "the agent reads the file, runs the tests and fixes what fails. "


@pytest.fixture(scope="module")
def server(fim_coder):
    with LiveServer(model=str(fim_coder), ctx=4096, batch=4, slot_ctx=2048, threads=1) as s:
        yield s


def placed(s: LiveServer, request: int) -> dict:
    """The request's placement in the trace (where it ran and why)."""
    return next(d for d in reversed(s.state.scheduler.placer.trace)
                if d["request"] == request and not d["park"] and not d["park_skip"])


def main_tokens(s: LiveServer) -> list[int]:
    return list(s.state.scheduler.table.main.tokens)


def chat(s: LiveServer, messages: list[dict]) -> tuple[dict, int]:
    r = httpx.post(s.url + "/v1/chat/completions", timeout=60,
                   json={"messages": messages, "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json(), int(r.headers["x-strata-request"])


def infill(s: LiveServer, typed: str, **extra) -> httpx.Response:
    return httpx.post(s.url + "/infill", timeout=60, json={
        "input_prefix": CODE, "prompt": typed, "input_suffix": "\n\nprint(y)\n" * 3, "n_predict": 4,
        "temperature": 0, **extra})


def test_a_completion_typed_while_the_agent_waits_runs_in_a_slot(server):
    s = server
    first, req = chat(s, [{"role": "user", "content": WORDS * 20}])
    assert placed(s, req)["slot"] == "main"                        # the agent's request, alone: main
    history = main_tokens(s)
    for i in range(3):                                            # the user types; each completion runs alone
        r = infill(s, "y = " + "x" * i)
        assert r.status_code == 200, r.text
        where = placed(s, int(r.headers["x-strata-request"]))
        assert where["slot"] != "main", where                     # before: main ("solo")
    assert main_tokens(s) == history                              # the agent's history stayed in main


def test_an_agent_request_beside_a_running_completion_runs_in_main(server):
    s = server
    messages = [{"role": "user", "content": WORDS * 24}]
    first, req = chat(s, messages)
    assert placed(s, req)["slot"] == "main"
    done = threading.Event()
    answer: list[httpx.Response] = []

    def type_a_long_one() -> None:
        answer.append(infill(s, "z = ", n_predict=300, ignore_eos=True))
        done.set()

    sched = s.state.scheduler
    with _SlowTokens(s.state.engine):
        threading.Thread(target=type_a_long_one, daemon=True).start()
        _wait_for(lambda: any(c.busy_job is not None and c.completion for c in sched.table.slots),
                  "the completion to run in a slot")
        time.sleep(0.2)
        messages += [{"role": "assistant", "content": first["choices"][0]["message"]["content"] or "ok"},
                     {"role": "user", "content": "go on"}]
        turn, req = chat(s, messages)
        assert not done.is_set()                                  # the completion still ran beside it
        where = placed(s, req)
        assert where["slot"] == "main" and where["reason"] == "beside_completions", where  # before: a slot
        could = first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"]
        assert turn["usage"]["prompt_tokens_details"]["cached_tokens"] >= could - 1
        assert done.wait(60) and answer[0].status_code == 200
