"""The scheduler under randomized clients that leave at any moment, a queue that overflows, and a stop
with requests queued and running (tests/server/sched_stress.py draws the clients): every client gets an
end (an answer, a 503 with Retry-After, an error event; never a hang), and afterwards the server is at
rest: every context idle and its table entry equal to what the engine holds, the gauges 0, a conversation
continued from its cached prefix with the greedy answer a fresh server gives, no thread or engine left
once it stops."""

from __future__ import annotations

import collections
import gc
import threading

import httpx2 as httpx
import psutil
import pytest

from tests.server.live import LiveServer
from tests.server.sched_stress import check_at_rest, run_agents

SEED = 2024
N_AGENTS, PER_AGENT = 8, 30           # 240 requests a server
MEMORY_BOUND_MIB = 32                 # RSS growth of the test process (the server in it) over them: the 8 MiB RAM cache fills


@pytest.fixture(scope="module")
def stress_model(tiny_model_factory):
    """4 layers, 128 wide: slow enough (a prompt read in several pieces, streams running together) for
    the clients' leaves to land in every phase, fast enough for a few hundred requests."""
    return tiny_model_factory(ctx_len=4096, n_vocab=512, seed=7, n_layer=4, n_embd=128, n_ff=384, n_head=4,
                              n_head_kv=2)


def serve(model, tmp_path, batch: int, queue: int = 3, **flags) -> LiveServer:
    flags.setdefault("slot_ctx", 2048 if batch else None)
    return LiveServer(model=str(model), ctx=4096, batch=batch, threads=1, queue=queue, prefill_chunk=64,
                      conversation_cache_mib=8, conversation_cache_cold_dir=str(tmp_path / "cold"),
                      conversation_cache_cold_mib=64,
                      **{k: v for k, v in flags.items() if v is not None})


def engines_alive() -> int:
    from aiohttp import web_app
    from strata.engine import Engine

    web_app._cached_build_middleware.cache_clear()    # aiohttp's cache of each app's middleware chain holds the app
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, Engine))


def continued_conversation(url: str) -> tuple[list[int], int, int]:
    """Two turns of one conversation, greedy: (turn 2's answer tokens, its cached tokens, turn 1's prompt
    and answer tokens)."""
    messages = [{"role": "system", "content": "Check the tree. " * 30}, {"role": "user", "content": "list it " * 5}]
    r1 = httpx.post(url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 12, "temperature": 0},
                    timeout=60).json()
    messages += [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "and again " * 3}]
    r2 = httpx.post(url + "/v1/completions", json={"prompt": messages[-1]["content"], "max_tokens": 1}, timeout=60)
    assert r2.status_code == 200
    r2 = httpx.post(url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 12, "temperature": 0,
                                                         "logprobs": True}, timeout=60).json()
    tokens = [t["token"] for t in r2["choices"][0]["logprobs"]["content"]]
    return tokens, r2["usage"]["prompt_tokens_details"]["cached_tokens"], r1["usage"]["total_tokens"]


@pytest.mark.parametrize("batch", [2, 0])
def test_clients_that_leave_at_any_moment_leave_nothing_behind(stress_model, tmp_path, batch):
    threads_before = {t.ident for t in threading.enumerate()}
    engines_before = engines_alive()
    with serve(stress_model, tmp_path, batch) as server:
        run_agents(server.url, SEED + 100 + batch, n_agents=N_AGENTS, per_agent=3)   # every path allocated once
        rss = psutil.Process().memory_info().rss
        outcomes = run_agents(server.url, SEED + batch, n_agents=N_AGENTS, per_agent=PER_AGENT)
        grown_mib = (psutil.Process().memory_info().rss - rss) / 2**20
        problems = [p for o in outcomes for p in o.problems]
        assert not problems, problems[:10]
        ends = collections.Counter(o.end for o in outcomes)
        print(f"--batch {batch}: {dict(ends)}, RSS grew {grown_mib:.1f} MiB")
        # answers, clients that left, and (8 clients, --queue 3) 503s with Retry-After before the queue drained
        assert ends["done"] > 0 and ends["left"] > 0 and ends["503"] > 0, ends
        assert grown_mib < MEMORY_BOUND_MIB, f"RSS grew by {grown_mib:.1f} MiB"
        check_at_rest(server)
        answer, cached, turn1 = continued_conversation(server.url)
        assert server.state.scheduler.last_error is None
        assert "error" not in server.state.metrics.snapshot()["requests_total"]
    with serve(stress_model, tmp_path / "fresh", 0) as fresh:
        fresh_answer, fresh_cached, _ = continued_conversation(fresh.url)
    assert answer == fresh_answer
    assert cached == fresh_cached >= turn1 // 2, (cached, fresh_cached, turn1)
    del server, fresh
    left = [t for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()]
    assert not left, [t.name for t in left]
    assert engines_alive() == engines_before


def test_the_queue_holds_queue_requests_while_main_is_free_but_not_theirs(stress_model, tmp_path):
    """--batch 1 --queue 1: main free (its request left), the slot busy. A prompt that fits the slot waits
    for the slot, not main (main is the solo path), so it is in the queue: the next is a 503."""
    from tests.server.sched_stress import Client, Pause, body_for, wait_for

    with serve(stress_model, tmp_path, 1, queue=1) as server:
        sched = server.state.scheduler

        def stream(tag: str) -> Client:
            path, body = body_for("chat_stream", [{"role": "system", "content": tag}, {"role": "user", "content": "go"}],
                                  2000)
            return Client(server.url + path, "chat_stream", dict(body, ignore_eos=True))

        with Pause(server.state.engine, "decode extend step", lambda *a: sched.table.main.busy_job is not None) as held:
            on_main = stream("first")             # alone: main
            assert held.entered.wait(60)
            in_slot = stream("second")            # beside it: the slot
            wait_for(lambda: sched.queue_depth == 1, what="the second queued")
        wait_for(lambda: sched.table[1].busy_job is not None, what="the second in the slot")
        # the worker held at its first step with main free and the slot busy
        with Pause(server.state.engine, "decode extend step",
                   lambda *a: sched.table.main.busy_job is None and sched.table[1].busy_job is not None) as held:
            on_main.leave()
            assert held.entered.wait(60)
            waiting = stream("third")
            wait_for(lambda: sched.queue_depth == 1, what="the third queued")
            path, body = body_for("chat", [{"role": "user", "content": "x"}], 1)
            fourth = Client(server.url + path, "chat", body)
            wait_for(lambda: fourth.out.end or sched.queue_depth == 2, what="the fourth answered or queued")
            assert fourth.out.end == "503", (fourth.out, sched.queue_depth)
        waiting.leave()
        in_slot.leave()
        check_at_rest(server)
