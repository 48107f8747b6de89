"""A real `strata serve` application on loopback for tests: its own event loop in a thread, port 0, the
same `init_app` the CLI uses. No fakes: the engine, scheduler and cache are the real ones. Also what the
live-server tests share around it: their one-token completions, the cold-only flags, a damaged image."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
from aiohttp import web
from strata.server.app import init_app
from strata.server.config import load_config
from strata.server.keys import STATE
from strata.server.stop_progress import SHUTDOWN_TIMEOUT_S


class LiveServer:
    def __init__(self, **flags: Any) -> None:
        flags.setdefault("host", "127.0.0.1")
        flags.setdefault("port", 0)
        env = flags.pop("env", {})
        self.config = load_config({k: v for k, v in flags.items()}, environ=env)
        self.loop = asyncio.new_event_loop()
        self.app: web.Application | None = None
        self.runner: web.AppRunner | None = None
        self.port = 0
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def state(self):
        assert self.app is not None
        return self.app[STATE]

    def start(self, wait_ready: bool = True, timeout: float = 120.0) -> LiveServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(60)
        if wait_ready:
            deadline = time.monotonic() + timeout
            while not self.state.ready:
                if self.state.load_error:
                    raise RuntimeError(self.state.load_error)
                if time.monotonic() > deadline:
                    raise TimeoutError("the server did not become ready")
                time.sleep(0.02)
        return self

    async def _start(self) -> None:
        self.app = init_app(self.config)
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    def stop(self) -> None:
        if self.runner is not None:
            asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(60)
        # the executor's threads (the model load, the scheduler's stop) end here, as asyncio.run ends them
        asyncio.run_coroutine_threadsafe(self.loop.shutdown_default_executor(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def complete(url: str, prompt: list[int], timeout: float = 120) -> dict:
    """A one-token greedy completion of `prompt` (token ids), which must be a 200: its usage."""
    r = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 1, "temperature": 0},
                   timeout=timeout)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def cold_only(model: Any, tmp_path: Path, **flags: Any) -> dict[str, Any]:
    """LiveServer flags for main only and the cold level only (64 MiB in tmp_path/cold), histories parked straight
    to disk; `flags` add to them (a sessions folder)."""
    return dict(model=str(model), ctx=4096, batch=0, threads=1, conversation_cache_mib=0,
                conversation_cache_park="disk", conversation_cache_cold_dir=str(tmp_path / "cold"),
                conversation_cache_cold_mib=64, **flags)


def flip_bytes(path: str | Path, at: int, n: int = 16) -> None:
    """`n` bytes of the file at `path`, from offset `at`, inverted in place (a disk that changed them)."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(n)
        f.seek(at)
        f.write(bytes(x ^ 0xFF for x in b))


def flip_at_three_quarters(path: str | Path) -> None:
    """16 bytes of a chunk near the image's end: the chunks before it are sound."""
    flip_bytes(path, os.path.getsize(path) * 3 // 4)


def run_together(server: LiveServer, sends: list[Callable[[], Any]]) -> list[Any]:
    """Calls each of `sends` (one request each) in its own thread so that the requests are in flight
    together, queued in the given order (one alone would run solo on main): the scheduler's worker is
    held between two steps until all are queued. Returns their results in the same order."""
    sched = server.state.scheduler
    held, release = threading.Event(), threading.Event()
    gate = sched.call(lambda: (held.set(), release.wait(60)))
    assert held.wait(30)
    results: list[Any] = [None] * len(sends)
    threads = []
    for i, send in enumerate(sends):
        threads.append(threading.Thread(target=lambda i=i, send=send: results.__setitem__(i, send())))
        threads[-1].start()
        deadline = time.monotonic() + 30
        while sched.queue_depth < i + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sched.queue_depth == i + 1, f"request {i} was not queued"
    release.set()
    gate.result(30)
    for t in threads:
        t.join()
    return results


def scripted_model(factory: Callable[..., Any], answer: str, **shape: Any) -> Any:
    """The path of a tiny model (tests/fixtures/tiny_gguf.py `script`) that answers `answer` to any chat,
    then ends its turn (<|im_end|>, id 2); `shape` are make_tiny_gguf's parameters (`added_tokens` for
    the whole-word pieces a script needs, as its tokens must all differ)."""
    from strata.engine import Engine

    ids = Engine(str(factory(**shape)), n_ctx=64, n_threads=1).tokenize("\n" + answer, special=True)
    return factory(**shape, script=tuple(ids) + (2,))


def sdk_clients(server: LiveServer) -> tuple[Any, Any]:
    """The real `openai` and `anthropic` SDK clients of a live server (no retries, 120 s timeouts)."""
    import anthropic
    import openai

    return (openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120),
            anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=120))


def check_reasoning_text_and_call(oai: Any, msgs: list, tools: list, args: dict) -> list:
    """The live reasoning-format tests' OpenAI round trip (GLM, Seed-OSS): a scripted answer of reasoning
    "Need ls.", text "Let me look." and one bash call of `args`, whole and streamed, and its second turn
    reading nothing of the first again. Returns the streamed chunks."""
    import json

    r = oai.chat.completions.create(model="m", messages=msgs, tools=tools, temperature=0, max_tokens=40)
    m = r.choices[0].message
    assert (m.reasoning_content, m.content, r.choices[0].finish_reason) == ("Need ls.", "Let me look.", "tool_calls")
    assert [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls] == [("bash", args)]
    turn2 = msgs + [m.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "a.py"}]
    r2 = oai.chat.completions.create(model="m", messages=turn2, tools=tools, temperature=0, max_tokens=4)
    # the template writes the reasoning, text and call back as the model wrote them: nothing is read again
    assert r2.usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens + r.usage.completion_tokens

    chunks = list(oai.chat.completions.create(model="m", messages=msgs, tools=tools, temperature=0, max_tokens=40,
                                              stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(getattr(d, "reasoning_content", None) or "" for d in deltas) == "Need ls."
    assert "".join(d.content or "" for d in deltas) == "Let me look."
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert [json.loads("".join(tc.function.arguments or "" for tc in calls))] == [args]
    return chunks


def check_cut_call(oai: Any, claude: Any, msgs: list, tools: list, claude_tools: list, responses_tools: list,
                   cut: int | None, arguments: str | None, *, max_tokens: int | None = None,
                   text: str = "Let me look.") -> None:
    """The live tool-format tests' cut call (GLM, Seed-OSS, Mistral): the scripted answer (GLM / Seed-OSS: of
    check_reasoning_text_and_call) cut `cut` pieces short of its end, or at `max_tokens`, is `text` and a cut call
    of its tool with `arguments` as far as written (None: no call), never its markup as text: OpenAI's chat whole
    and streamed (finish_reason "length"), Anthropic's messages whole and streamed (`msgs[1:]`, no system;
    stop_reason "max_tokens", the tool_use input the members written whole: the anthropic SDK's partial
    reading) and the Responses API (incomplete)."""
    import jiter

    if max_tokens is None:
        r = oai.chat.completions.create(model="m", messages=msgs, tools=tools, temperature=0, max_tokens=40)
        max_tokens = r.usage.completion_tokens - cut        # the answer (end token not counted) less `cut` pieces
    name = tools[0]["function"]["name"]
    want = [] if arguments is None else [(name, arguments)]
    r = oai.chat.completions.create(model="m", messages=msgs, tools=tools, temperature=0, max_tokens=max_tokens)
    c = r.choices[0]
    assert (c.finish_reason, c.message.content) == ("length", text)
    assert [(t.function.name, t.function.arguments) for t in c.message.tool_calls or ()] == want
    chunks = list(oai.chat.completions.create(model="m", messages=msgs, tools=tools, temperature=0,
                                              max_tokens=max_tokens, stream=True))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    assert "".join(d.content or "" for d in deltas) == text
    assert [(t.function.name, t.function.arguments) for d in deltas for t in d.tool_calls or ()] == want
    assert chunks[-1].choices[0].finish_reason == "length"
    uses = [("text", text)] + [("tool_use", (name, jiter.from_json(a.encode(), partial_mode=True)
                                                       if a else {})) for _, a in want]
    m = claude.messages.create(model="m", max_tokens=max_tokens, messages=msgs[1:], tools=claude_tools)
    with claude.messages.stream(model="m", max_tokens=max_tokens, messages=msgs[1:], tools=claude_tools) as st:
        final = st.get_final_message()
    for msg in (m, final):
        assert msg.stop_reason == "max_tokens"
        assert [(b.type, b.text if b.type == "text" else (b.name, b.input)) for b in msg.content
                if b.type != "thinking"] == uses
    rr = oai.responses.create(model="m", input=msgs[-1]["content"], tools=responses_tools, max_output_tokens=max_tokens)
    assert (rr.status, rr.output_text) == ("incomplete", text)
    assert [(o.name, o.arguments) for o in rr.output if o.type == "function_call"] == want
