"""Soak: 8 clients send mixed traffic (both APIs, streaming and not, growing conversations, streams
cancelled midway, answers held to a JSON schema, a few deliberately bad requests) to one live server on the tiny model. No error but
the intended ones; the server is healthy and idle afterwards; memory grows by less than the stated bound
(64 MiB of RSS after a warm-up, for the whole test process, which hosts the server).

The default run sends ~100 requests; the @slow one ~400."""

from __future__ import annotations

import json
import random
import threading

import anthropic
import httpx2 as httpx
import openai
import psutil
import pytest

from tests.server.live import LiveServer

MEMORY_BOUND_MIB = 64
JSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "r", "schema": {
    "type": "object", "additionalProperties": False, "required": ["ok"],
    "properties": {"ok": {"type": "boolean"}, "why": {"type": "string", "maxLength": 20}}}}}
N_CLIENTS = 8


@pytest.fixture(scope="module")
def soak_server(tiny_model, tmp_path_factory):
    with LiveServer(model=str(tiny_model), ctx=4096, batch=4, slot_ctx=2048, threads=1, queue=64,
                    conversation_cache_mib=64,
                    conversation_cache_cold_dir=str(tmp_path_factory.mktemp("soak-cold"))) as s:
        yield s


def client_loop(url: str, seed: int, n: int, errors: list, counts: dict) -> None:
    rng = random.Random(seed)
    oai = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=120)
    claude = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=120)
    history: list[dict] = [{"role": "system", "content": f"Agent {seed}. " + "Rules. " * rng.randrange(5, 60)}]
    for _ in range(n):
        kind = rng.choice(["chat", "chat_stream", "messages", "messages_stream", "completion", "cancel", "bad", "json"])
        history.append({"role": "user", "content": f"step {rng.randrange(1000)} " * rng.randrange(1, 20)})
        if len(history) > 12:
            history = history[:1] + history[-1:]
        max_tokens = rng.randrange(1, 40)
        try:
            if kind == "chat":
                r = oai.chat.completions.create(model="m", messages=history, max_tokens=max_tokens)
                answer = r.choices[0].message.content or ""
            elif kind == "chat_stream":
                answer = "".join(c.choices[0].delta.content or "" for c in oai.chat.completions.create(
                    model="m", messages=history, max_tokens=max_tokens, stream=True) if c.choices)
            elif kind in ("messages", "messages_stream"):
                system, msgs = history[0]["content"], history[1:]
                if kind == "messages":
                    r = claude.messages.create(model="m", max_tokens=max_tokens, system=system, messages=msgs)
                    answer = "".join(b.text for b in r.content if b.type == "text")
                else:
                    with claude.messages.stream(model="m", max_tokens=max_tokens, system=system, messages=msgs) as s:
                        answer = "".join(s.text_stream)
            elif kind == "json":      # an answer held to a schema, drawn at a temperature, among the others
                r = oai.chat.completions.create(model="m", messages=history, max_tokens=200, temperature=0.8,
                                                seed=rng.randrange(1000), response_format=JSON_FORMAT)
                answer = r.choices[0].message.content or ""
                if r.choices[0].finish_reason == "stop" and json.loads(answer).get("ok") not in (True, False):
                    errors.append(f"json: an answer outside its schema: {answer!r}")
            elif kind == "completion":
                oai.completions.create(model="m", prompt="side request " * rng.randrange(1, 30), max_tokens=5)
                answer = None
            elif kind == "cancel":
                body = {"messages": history, "max_tokens": 1500, "stream": True}
                with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
                    for i, _ in enumerate(r.iter_lines()):
                        if i >= rng.randrange(2, 6):
                            break
                answer = None
            else:
                r = httpx.post(url + "/v1/chat/completions", json={"messages": history, "max_tokens": -1})
                if r.status_code != 400:
                    errors.append(f"bad request answered {r.status_code}")
                answer = None
            if answer is not None:
                history.append({"role": "assistant", "content": answer})
            else:
                history.pop()
            counts[kind] = counts.get(kind, 0) + 1
        except Exception as e:  # every failure here is unexpected
            errors.append(f"{kind}: {type(e).__name__}: {e}")


def run_soak(server: LiveServer, per_client: int, seed: int) -> dict:
    errors: list[str] = []
    counts: dict[str, int] = {}
    threads = [threading.Thread(target=client_loop, args=(server.url, seed + i, per_client, errors, counts))
               for i in range(N_CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors[:10]
    assert httpx.get(server.url + "/health").status_code == 200
    totals = httpx.get(server.url + "/v1/monitor").json()["totals"]
    return {"counts": counts, "totals": totals}


def soak(server: LiveServer, per_client: int) -> None:
    proc = psutil.Process()
    run_soak(server, 2, seed=1000)                       # warm-up: every code path allocated once
    before = proc.memory_info().rss
    result = run_soak(server, per_client, seed=2000)
    grown_mib = (proc.memory_info().rss - before) / 2**20
    assert sum(result["counts"].values()) == N_CLIENTS * per_client
    assert result["counts"].get("cancel", 0) > 0
    assert result["totals"]["in_flight"] == 0 and result["totals"]["queue_depth"] == 0
    assert grown_mib < MEMORY_BOUND_MIB, f"RSS grew by {grown_mib:.1f} MiB"
    assert server.state.scheduler.last_error is None
    assert "error" not in server.state.metrics.snapshot()["requests_total"]


def test_soak_short(soak_server):
    soak(soak_server, per_client=12)        # 96 requests after the warm-up


@pytest.mark.slow
def test_soak_long(soak_server):
    soak(soak_server, per_client=50)        # 400 requests
