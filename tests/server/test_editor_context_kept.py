"""An editor's context beside agents (server/editor_place.py), on a live server: an agent does not take the slot
holding the active editor's file while another slot is idle, and a completion that finds every slot busy runs in
main instead of waiting for an agent's turn to end; and an agent whose only idle slot is the editor's goes on in main
where main holds its own conversation. Before, an agent arriving between two keystrokes took the
editor's slot (seed 000's least loss: its history is the shortest) and the next keystroke read the file again;
and with the agents in every slot each keystroke queued past the editor's time-out while main stood idle
(fim_beside_agent.py --agents 4: 1-63 s in the queue, 'no context').

Real server: a tiny model with fill-in-the-middle tokens, --batch 4, slots of 2,048 tokens. Every history stays
protected through the test (STRATA_SLOT_TTL_MAX_S x100) and the editor counts as active throughout
(STRATA_SLOT_EDITOR_HOLD_S 600), so what is asserted does not hang on the machine's speed; the agents' answers are
made slow (20 ms a token) where they must run beside the next request."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer
from tests.server.test_session_waits_for_idle import _SlowTokens, _wait_for

CODE = "def step(self, x):\n    return self.layer(x) + x\n" * 12
ENV = {"STRATA_SLOT_TTL_MAX_S": "12000", "STRATA_SLOT_EDITOR_HOLD_S": "600"}


@pytest.fixture(scope="module")
def server(fim_coder):
    with LiveServer(model=str(fim_coder), ctx=4096, batch=4, slot_ctx=2048, threads=1, env=ENV) as s:
        yield s


def placed(s: LiveServer, request: int) -> dict:
    """The request's placement in the trace (where it ran and why)."""
    return next(d for d in reversed(s.state.scheduler.placer.trace)
                if d["request"] == request and not d["park"] and not d["park_skip"])


def words(i: int, n: int) -> str:
    """An agent's prompt of its own (no start shared with another's)."""
    return f"agent {i} reads file {i} and fixes test {i}. " * n


def chat(s: LiveServer, text: str, max_tokens: int = 3, **extra) -> int:
    r = httpx.post(s.url + "/v1/chat/completions", timeout=120,
                   json={"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
                         "temperature": 0, **extra})
    assert r.status_code == 200, r.text
    return int(r.headers["x-strata-request"])


def start_agents(s: LiveServer, first: int, n: int) -> list[threading.Event]:
    """`n` agents' long turns (prompts words(first + i, 20), 400 tokens), each from its own thread: the events they
    set once answered."""
    done = [threading.Event() for _ in range(n)]

    def agent(i: int) -> None:
        chat(s, words(first + i, 20), max_tokens=400, ignore_eos=True)
        done[i].set()

    for i in range(n):
        threading.Thread(target=agent, args=(i,), daemon=True).start()
    return done


def infill(s: LiveServer, typed: str) -> int:
    r = httpx.post(s.url + "/infill", timeout=120, json={
        "input_prefix": CODE, "prompt": typed, "input_suffix": "\n\nprint(y)\n" * 3, "n_predict": 4,
        "temperature": 0})
    assert r.status_code == 200, r.text
    return int(r.headers["x-strata-request"])


@contextmanager
def streaming_in_main(s: LiveServer, text: str) -> Iterator[None]:
    """A long answer streamed to an agent alone (main) while the block runs; its client leaves at the end and
    main is idle again after it."""
    sched = s.state.scheduler
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 1500, "temperature": 0,
            "stream": True, "ignore_eos": True}
    with httpx.stream("POST", s.url + "/v1/chat/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        _wait_for(lambda: sched.table.main.busy_job is not None, "the streamed request to run in main")
        yield
    _wait_for(lambda: sched.table.main.busy_job is None, "main to be idle once its client left")


def test_an_agent_does_not_take_the_active_editors_slot_when_another_is_idle(server):
    s = server
    with _SlowTokens(s.state.engine), streaming_in_main(s, words(0, 30)):
        editor = placed(s, infill(s, "y = "))["slot"]          # beside the stream: a slot
        assert editor != "main"
        agents = [placed(s, chat(s, words(i, 40)))["slot"] for i in (1, 2, 3)]
        assert sorted([editor, *agents]) == [1, 2, 3, 4]       # each took a blank slot
        # every history protected: seed 000 gives the least loss up, the editor's (shorter) history
        where = placed(s, chat(s, words(4, 40)))
        assert where["slot"] != editor and where["reason"] == "least_loss", where   # before: the editor's slot
        nxt = placed(s, infill(s, "y = s"))                   # the next keystroke finds its file where it was
        assert (nxt["slot"], nxt["reason"]) == (editor, "editor_file"), nxt
        assert nxt["reused"] > 0


def test_a_completion_runs_in_main_when_every_slot_is_busy(server):
    s = server
    sched = s.state.scheduler
    with _SlowTokens(s.state.engine):
        with streaming_in_main(s, words(9, 20)):
            done = start_agents(s, 10, 4)
            _wait_for(lambda: all(c.busy_job is not None for c in sched.table.slots), "the agents in every slot")
        where = placed(s, infill(s, "y = x"))
        assert not any(e.is_set() for e in done)               # it ran while the agents held every slot
        assert (where["slot"], where["reason"]) == ("main", "editor_main"), where   # before: it waited for a slot
        assert sched.table.main.completion
        nxt = placed(s, infill(s, "y = x."))                  # the next keystroke goes on from main
        assert (nxt["slot"], nxt["reason"]) == ("main", "editor_file"), nxt
        for e in done:
            assert e.wait(120)


@pytest.fixture(scope="module")
def fresh_server(fim_coder):
    with LiveServer(model=str(fim_coder), ctx=4096, batch=4, slot_ctx=2048, threads=1, env=ENV) as s:
        yield s


def test_an_agent_whose_only_idle_slot_is_the_editors_goes_on_in_main(fresh_server):
    s = fresh_server
    sched = s.state.scheduler
    with _SlowTokens(s.state.engine):
        with streaming_in_main(s, words(0, 60)):               # an agent's turn in main, its client leaving below
            editor = placed(s, infill(s, "y = "))["slot"]      # beside it: a blank slot
            done = start_agents(s, 20, 3)                      # three agents in the other slots, still running
            _wait_for(lambda: all(c.busy_job is not None for c in sched.table.slots if c.id != editor),
                      "the agents in the other slots")
        # its turn asked again beside them: main holds its own conversation, the editor's slot is the only idle one
        where = placed(s, chat(s, words(0, 60)))
        assert not any(e.is_set() for e in done)
        assert (where["slot"], where["reason"]) == ("main", "editor_held_main"), where   # before: the editor's slot
        nxt = placed(s, infill(s, "y = s"))
        assert (nxt["slot"], nxt["reason"]) == (editor, "editor_file"), nxt
        for e in done:
            assert e.wait(120)
