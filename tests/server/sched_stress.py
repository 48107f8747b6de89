"""Randomized clients for the scheduler's stress tests (tests/server/test_scheduler_stress.py): each
request goes through one API (chat, messages, responses; streamed or not; the Responses websocket) and
either reads its answer to the end or leaves at a drawn moment (after a delay, or after some events).
All from one asyncio loop with aiohttp, so that a leave is a real closed connection.

And the invariants a server must be back to afterwards (`check_at_rest`)."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from dataclasses import dataclass, field

import aiohttp

KINDS = ("chat", "chat_stream", "messages", "messages_stream", "responses", "responses_stream", "responses_ws")
WAIT_S = 60.0


@dataclass
class Outcome:
    kind: str
    leave: str                    # "none" | "delay" | "events"
    status: int | None = None
    end: str = ""                 # how the answer ended as the client saw it ("done", "left", "503", "error", ...)
    text: str = ""
    problems: list[str] = field(default_factory=list)


def body_for(kind: str, messages: list[dict], max_tokens: int) -> tuple[str, dict]:
    if kind.startswith("chat"):
        return "/v1/chat/completions", {"model": "m", "messages": messages, "max_tokens": max_tokens,
                                        "temperature": 0, "stream": kind.endswith("stream")}
    if kind.startswith("messages"):
        return "/v1/messages", {"model": "m", "system": messages[0]["content"], "messages": messages[1:],
                                "max_tokens": max_tokens, "temperature": 0, "stream": kind.endswith("stream")}
    return "/v1/responses", {"model": "m", "instructions": messages[0]["content"], "input": messages[1:],
                             "max_output_tokens": max_tokens, "temperature": 0, "stream": kind == "responses_stream"}


async def one_request(session: aiohttp.ClientSession, url: str, kind: str, messages: list[dict], max_tokens: int,
                      leave: str, leave_after: float, extra: dict | None = None) -> Outcome:
    """One request; with `leave` "delay" the client goes away after `leave_after` seconds, with "events"
    after int(leave_after) events (SSE events or websocket frames; a non-streamed answer has none: delay)."""
    out = Outcome(kind, leave)
    path, body = body_for(kind, messages, max_tokens)
    body.update(extra or {})
    try:
        coro = (_websocket(session, url, body, out, leave, leave_after) if kind == "responses_ws"
                else _http(session, url + path, body, out, leave, leave_after))
        if leave == "delay":
            try:
                await asyncio.wait_for(coro, leave_after)
            except asyncio.TimeoutError:
                out.end = out.end or "left"
        else:
            await asyncio.wait_for(coro, WAIT_S)
    except asyncio.TimeoutError:
        out.problems.append(f"{kind}: no end within {WAIT_S:.0f} s (a hang)")
    except (aiohttp.ClientError, ConnectionError) as e:
        out.problems.append(f"{kind}: {type(e).__name__}: {e}")
    return out


async def _http(session: aiohttp.ClientSession, url: str, body: dict, out: Outcome, leave: str,
                leave_after: float) -> None:
    async with session.post(url, json=body) as r:
        out.status = r.status
        if r.status == 503:
            out.end = "503"
            if "Retry-After" not in r.headers:
                out.problems.append(f"{out.kind}: a 503 without Retry-After")
            return
        if not body["stream"]:
            data = await r.json()
            if r.status != 200:
                out.end = "error"
                out.problems.append(f"{out.kind}: {r.status} {data}")
                return
            out.end = "done"
            out.text = _whole_text(out.kind, data)
            return
        if r.status != 200:
            out.end = "error"
            out.problems.append(f"{out.kind}: {r.status} {await r.text()}")
            return
        n = 0
        last = ""
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            n += 1
            last = line[6:]
            out.text += _delta_text(out.kind, last)
            if leave == "events" and n >= int(leave_after):
                out.end = "left"
                return
        out.end = _stream_end(out.kind, last)
        if out.end not in ("done", "stopped"):
            out.problems.append(f"{out.kind}: the stream ended without a final event (last {last[:200]!r})")


async def _websocket(session: aiohttp.ClientSession, url: str, body: dict, out: Outcome, leave: str,
                     leave_after: float) -> None:
    async with session.ws_connect(url + "/v1/responses") as ws:
        out.status = 101
        await ws.send_json({"type": "response.create", **{k: v for k, v in body.items() if k != "stream"}})
        n = 0
        while True:
            msg = await ws.receive()
            if msg.type != aiohttp.WSMsgType.TEXT:
                out.end = "closed"
                out.problems.append(f"{out.kind}: the socket closed before a terminal event ({msg.type})")
                return
            n += 1
            event = json.loads(msg.data)
            if event["type"] == "response.output_text.delta":
                out.text += event["delta"]
            if event["type"] == "error":
                out.end = "503" if event.get("status") == 503 else "error"
                if out.end == "error":
                    out.problems.append(f"{out.kind}: {event}")
                return
            if event["type"] in ("response.completed", "response.incomplete"):
                out.end = "done"
                return
            if event["type"] == "response.failed":
                out.end = "stopped"
                return
            if leave == "events" and n >= int(leave_after):
                out.end = "left"
                return


def _whole_text(kind: str, data: dict) -> str:
    if kind.startswith("chat"):
        return data["choices"][0]["message"]["content"] or ""
    if kind.startswith("messages"):
        return "".join(b.get("text", "") for b in data["content"])
    return "".join(c.get("text", "") for item in data["output"] if item["type"] == "message" for c in item["content"])


def _delta_text(kind: str, data: str) -> str:
    if data == "[DONE]":
        return ""
    event = json.loads(data)
    if kind.startswith("chat"):
        return "".join((c.get("delta") or {}).get("content") or "" for c in event.get("choices", []))
    if kind.startswith("messages"):
        return (event.get("delta") or {}).get("text", "") if event.get("type") == "content_block_delta" else ""
    return event.get("delta", "") if event.get("type") == "response.output_text.delta" else ""


def _stream_end(kind: str, last: str) -> str:
    """"done" for a normal last event, "stopped" for an error event (the server stopping), else ""."""
    if kind.startswith("chat"):
        return "done" if last == "[DONE]" else "stopped" if last and "error" in json.loads(last) else ""
    event = json.loads(last) if last else {}
    if kind.startswith("messages"):
        return {"message_stop": "done", "error": "stopped"}.get(event.get("type"), "")
    return {"response.completed": "done", "response.incomplete": "done",
            "response.failed": "stopped"}.get(event.get("type"), "")


HELD = {"type": "object", "additionalProperties": False, "required": ["status"],
        "properties": {"status": {"type": "string", "enum": ["finished", "failed"]}}}


def draw_request(rng: random.Random) -> tuple[str, int, str, float, dict]:
    """(kind, max_tokens, leave, leave_after, extra fields) for one request; one in four of the OpenAI
    ones held to a schema (its fixed text written through lookup steps)."""
    kind = rng.choice(KINDS)
    leave = rng.choice(("none", "none", "delay", "events"))
    leave_after = rng.uniform(0.0, 0.4) if leave == "delay" else rng.randrange(1, 8)
    if leave == "events" and kind in ("chat", "messages", "responses"):
        leave, leave_after = "delay", rng.uniform(0.0, 0.4)
    extra: dict = {}
    if rng.random() < 0.25 and kind.startswith("chat"):
        extra = {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": HELD}}}
    elif rng.random() < 0.25 and kind.startswith("responses"):
        extra = {"text": {"format": {"type": "json_schema", "name": "r", "schema": HELD}}}
    return kind, rng.randrange(1, 48), leave, leave_after, extra


async def agent(session: aiohttp.ClientSession, url: str, seed: int, n: int) -> list[Outcome]:
    """One client's conversation: a long system prompt (repeated phrases: lookup decoding drafts from it),
    growing by each answer read whole; an answer left midway is not kept."""
    rng = random.Random(seed)
    history = [{"role": "system", "content": f"Agent {seed}. " + "Keep the rules. " * rng.randrange(10, 80)}]
    outcomes = []
    for _ in range(n):
        history.append({"role": "user", "content": f"step {rng.randrange(1000)} " * rng.randrange(1, 30)})
        kind, max_tokens, leave, leave_after, extra = draw_request(rng)
        out = await one_request(session, url, kind, history, max_tokens, leave, leave_after, extra)
        outcomes.append(out)
        if out.end == "done" and out.text:
            history.append({"role": "assistant", "content": out.text})
        else:
            history.pop()
        if len(history) > 9:
            history = history[:1] + history[-2:]
        # after a 503 a client waits a little (not Retry-After's seconds: the test would idle), as SDKs do
        await asyncio.sleep(rng.uniform(0.05, 0.2) if out.end == "503" else rng.uniform(0.0, 0.05))
    return outcomes


def run_agents(url: str, seed: int, n_agents: int, per_agent: int) -> list[Outcome]:
    async def main() -> list[Outcome]:
        timeout = aiohttp.ClientTimeout(total=None, sock_read=WAIT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            groups = await asyncio.gather(*(agent(session, url, seed + i, per_agent) for i in range(n_agents)))
        return [o for g in groups for o in g]
    return asyncio.run(main())


# ----- the state a server must be back to -----

def wait_for(pred, timeout: float = WAIT_S, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.02)


def gauges(metrics_text: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r"^strata_(queue_depth|requests_in_flight) (\S+)$", metrics_text, re.M)}


def check_at_rest(server) -> list[dict]:
    """Every context idle, its mirror (the slot table) equal to what the engine's context holds, the
    gauges 0. Returns /v1/slots' slots."""
    import httpx2 as httpx

    sched = server.state.scheduler
    wait_for(lambda: sched.in_flight == 0 and sched.queue_depth == 0, what="in flight and queued back to 0")
    assert gauges(httpx.get(server.url + "/metrics", timeout=30).text) == {"queue_depth": 0.0,
                                                                           "requests_in_flight": 0.0}
    slots = httpx.get(server.url + "/v1/slots", timeout=30).json()["slots"]
    assert all(s["state"] in ("idle", "empty") for s in slots), slots
    engine = server.state.engine

    def contexts() -> list[tuple]:
        return [(c.id, c.valid, c.busy_job, list(c.tokens), list(engine.context_tokens(c.id)))
                for c in sched.table.contexts]

    for ctx, valid, busy, mirror, held in sched.call(contexts).result(WAIT_S):
        assert busy is None, f"context {ctx} still names job {busy}"
        if valid:
            assert mirror == held, f"context {ctx}: the table says {len(mirror)} tokens, the engine holds {len(held)}"
    for s, (_, _, _, mirror, _) in zip(slots, sched.call(contexts).result(WAIT_S), strict=True):
        assert s["tokens"] == len(mirror)
    return slots


# ----- a client that leaves at one chosen moment -----

class Pause:
    """Holds the worker thread inside one call of `obj.name` (the real one runs after): the first call
    for which `when(*args)` is true waits, with `entered` set, until `release` (60 s at most)."""

    def __init__(self, obj, names: str, when=lambda *a, **k: True) -> None:
        import threading

        self.obj, self.names, self.when = obj, names.split(), when
        self.real = {name: getattr(obj, name) for name in self.names}
        self.entered, self.release = threading.Event(), threading.Event()

    def __enter__(self) -> Pause:
        for name, real in self.real.items():
            def paused(*args, real=real, **kwargs):
                if not self.entered.is_set() and self.when(*args, **kwargs):
                    self.entered.set()
                    self.release.wait(WAIT_S)
                return real(*args, **kwargs)
            setattr(self.obj, name, paused)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        for name in self.names:
            delattr(self.obj, name)      # the class's own method again


class Client:
    """One request in a thread of its own (its own asyncio loop), that can be made to leave at once:
    `leave()` cancels it, which closes its connection."""

    def __init__(self, url: str, kind: str, body: dict) -> None:
        import threading

        self.url, self.kind, self.body = url, kind, body
        self.out = Outcome(kind, "none")
        self.loop = asyncio.new_event_loop()
        self.task = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        async def main() -> None:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as session:
                if self.kind == "responses_ws":
                    await _websocket(session, self.url, self.body, self.out, "none", 0)
                else:
                    await _http(session, self.url, self.body, self.out, "none", 0)
        self.task = self.loop.create_task(main())
        try:
            self.loop.run_until_complete(self.task)
        except asyncio.CancelledError:
            self.out.end = "left"
        finally:
            self.loop.close()

    def leave(self) -> None:
        wait_for(lambda: self.task is not None, what="the client started")
        self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(WAIT_S)

    def result(self) -> Outcome:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), f"{self.kind}: no end within {WAIT_S:.0f} s"
        return self.out
