"""A code completion's prompt is sized by a slot's context where the server has slots smaller than main (llama.cpp
sizes its /infill by a slot's n_ctx), so that it runs in a slot beside an agent generating in main. Sized by main's
--ctx, an editor's input_extra (llama.vscode's ring of recently seen chunks) filled main: the prompt fit no slot, so
the completion waited for the agent's whole turn and then displaced its history from main.

A real server (tiny model with FIM tokens, --ctx 8192, --batch 2, --slot-ctx 3072); the agent is a request of the
scheduler's generating in main, and the worker is held until the completion is queued, so it is placed while
the agent generates."""

from __future__ import annotations

import time

import pytest
import requests
from strata.engine.sampling import SamplingParams
from strata.server.fim_prompt import FIM_BATCH
from strata.server.jobs import Job

from tests.fixtures.fim_gguf import FIM_TEXTS, fim_model
from tests.server.live import LiveServer

SLOT_CTX = 3072
EXTRA = [{"filename": f"src/mod{i}.py", "text": f"def helper_{i}(a, b):\n    return a * {i} + b\n" * 40}
         for i in range(8)]     # about 8,000 tokens of other files


@pytest.fixture(scope="module")
def server(tiny_model_factory, tmp_path_factory):
    plain = tiny_model_factory(ctx_len=8192, n_vocab=512, seed=5, added_tokens=FIM_TEXTS)
    model = fim_model(plain, tmp_path_factory.mktemp("fim_slot") / "coder.gguf")
    with LiveServer(model=str(model), ctx=8192, batch=2, slot_ctx=SLOT_CTX, threads=1,
                    conversation_cache_mib=0) as s:
        yield s


def generating_agent(sched) -> Job:
    """A request generating in main until cancelled."""
    agent = Job(api="openai", prompt=[(i * 7) % 400 + 50 for i in range(200)], max_tokens=7900,
                sampling=SamplingParams(), ignore_eos=True)
    sched.submit(agent)
    deadline = time.monotonic() + 60
    while not any(r.job is agent and r.phase == "decode" for r in list(sched._rows.values())):
        assert time.monotonic() < deadline, "the agent did not start generating"
        time.sleep(0.01)
    return agent


def held_until_queued(sched) -> None:
    """Holds the worker thread (a Scheduler.call) until a request is handed to it: it is then placed while the
    agent still generates, however fast the tiny model ends its turn."""
    def wait() -> None:
        deadline = time.monotonic() + 60
        while not (sched._inbox or sched._waiting) and time.monotonic() < deadline:   # (taken in with the call)
            time.sleep(0.005)

    sched.call(wait)


def test_a_completion_with_other_files_runs_in_a_slot_beside_a_generating_agent(server):
    sched = server.state.scheduler
    agent = generating_agent(sched)
    try:
        held_until_queued(sched)
        r = requests.post(server.url + "/infill", timeout=300, json={
            "input_prefix": "def main():\n    x = helper_1(2, 3)\n", "input_suffix": "\n    return x\n",
            "input_extra": EXTRA, "n_predict": 4, "temperature": 0})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["truncated"] is True               # part of the other files left out
        # the slot's room for other files: SLOT_CTX - FIM_BATCH - 2 * n_predict (before: main's, 8192 - ...)
        assert SLOT_CTX - FIM_BATCH < answer["tokens_evaluated"] <= SLOT_CTX
        done = [x for x in list(sched.requests) if x["api"] == "infill"]
        assert done and done[-1]["context"] != "main"   # beside the agent (before: it waited for main)
    finally:
        sched.cancel(agent)



@pytest.mark.parametrize("n_predict", [0, -1])
def test_a_warm_up_with_a_whole_prefix_and_suffix_still_fits_a_slot(server, n_predict):
    """n_predict 0 (a warm-up) or -1 leaves the repo-level part n_ctx - FIM_BATCH: with a prefix and a suffix cut to
    their whole share and the FIM tokens that made the prompt SLOT_CTX + 1, a token past a slot (before: 3,073
    tokens, placed in main once the agent ended)."""
    sched = server.state.scheduler
    agent = generating_agent(sched)
    try:
        held_until_queued(sched)
        prefix = "".join(f"x{i} = helper_{i % 8}({i}, {i + 1})\n" for i in range(400))      # > 1,536 tokens
        suffix = "".join(f"y{i} = x{i} + {i}\n" for i in range(300))                        # > 510 tokens
        r = requests.post(server.url + "/infill", timeout=300, json={
            "input_prefix": prefix, "input_suffix": suffix, "input_extra": EXTRA, "n_predict": n_predict,
            "temperature": 0})
        assert r.status_code == 200, r.text
        assert SLOT_CTX - FIM_BATCH < r.json()["tokens_evaluated"] < SLOT_CTX
        done = [x for x in list(sched.requests) if x["api"] == "infill"]
        assert done and done[-1]["context"] != "main"
    finally:
        sched.cancel(agent)
