"""The monitor feed: `GET /v1/monitor` (one JSON snapshot of everything the monitor shows) and
`GET /v1/monitor/events` (the same snapshot as server-sent events, at most 4 a second), plus
`GET /v1/slots`. Field names are fixed by docs/internals.md ("Monitor feed"); an absent field means
"not applicable", never a fake 0. Read-only views; nothing here changes the server.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from aiohttp import web
from strata.server.errors import APIError
from strata.server.jobrun import open_sse, send_sse
from strata.server.keys import STATE, ServerState
from strata.server.openai_api import ready_state
from strata.server.parking import parkable
from strata.server.slots import held_by_another, idle_s, stop_order
from strata.server.socket_queue import unsent_bytes

from strata import __version__

MAX_EVENTS_PER_S = 4.0


def _drop_none(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def snapshot(state: ServerState, *, stop: bool = False) -> dict[str, Any]:
    """The monitor feed's object. `stop`: with what a clean stop now would do (stop_outlook), for `GET
    /v1/monitor` only: it compares the contexts' histories, and the events stream sends 4 snapshots a second to
    each monitor window, which never shows it (the app asks it once, as its stop begins)."""
    cfg = state.config
    out: dict[str, Any] = {
        # mono: the plots' time base (a wall clock's step, NTP or a resume from sleep, neither wipes nor bridges them)
        "time": time.time(), "mono": time.monotonic(), "version": __version__, "endpoint": cfg.url(),
        "info_line": state.info_line, "ready": state.ready,
        "log_tail": list(state.log_tail),
    }
    if state.load_error:
        out["error"] = state.load_error
    engine = state.engine
    if engine is not None:
        meta = getattr(engine, "metadata", {}) or {}
        out["model"] = _drop_none({
            "path": str(getattr(engine, "model_path", "")), "name": state.model_name,
            "description": state.model_description,
            "arch": getattr(engine, "arch", None), "quant": state.model_quant,
            "n_ctx_train": getattr(engine, "n_ctx_train", None) or meta.get(f"{getattr(engine, 'arch', '')}.context_length"),
            "n_expert": getattr(engine, "n_expert", None) or None,        # models with experts only
            "n_expert_used": getattr(engine, "n_expert_used", None) or None,
        })
        out["engine"] = _drop_none({
            "backend": getattr(engine, "backend", None), "threads": getattr(engine, "n_threads", None),
            "large_pages": getattr(engine, "large_pages", None), "kv_type": getattr(engine, "kv_type", None),
            "bytes_per_token": getattr(engine, "bytes_per_token", None),
        })
    sched = state.scheduler
    if sched is not None:
        out["slots"] = [_drop_none(s) for s in sched.slots_view()]
        out["requests"] = [_drop_none(r) for r in list(sched.requests)]
        out["decisions"] = [dict(d) for d in list(sched.placer.trace)]
        m = state.metrics.snapshot()
        out["totals"] = {
            "requests": sum(m["requests_total"].values()), "prompt_tokens": m["prompt_tokens_total"],
            "prompt_tokens_read": m["prompt_tokens_read"], "prompt_tokens_reused": m["prompt_tokens_reused"],
            "generated_tokens": m["generated_tokens_total"], "queue_depth": sched.queue_depth,
            "in_flight": sched.in_flight,
        }
        if stop:
            try:
                out["stop"] = stop_outlook(sched, state.cache)
            except Exception as e:  # the feed must not fail because one part did
                out["stop"] = {"error": str(e)}
    if state.cache is not None:
        try:
            out["cache"] = state.cache.snapshot_for_monitor()
        except Exception as e:  # the feed must not fail because one part did
            out["cache"] = {"error": str(e)}
    return out


def stop_outlook(sched: Any, cache: Any) -> dict[str, Any]:
    """What a clean stop now would do with the conversations (the app words its stop from it; it parsed the INFO
    line's text before): `keeps_on_disk`, a warm or cold level is on, so they outlive the process; `conversations`,
    how many histories it would write: the contexts' not parked yet (a copy another context holds whole counted
    once), RAM's and the spill writer's queue, less those the stop's plan, one over them all, leaves out for a disk
    budget (ConversationCache.stop_would_keep: the stop's "keeping N" lines count the same). A shorter copy in RAM of
    a history a context goes on with counts too."""
    if cache is None or not cache.keeps_across_restarts():
        return {"keeps_on_disk": False, "conversations": 0}
    contexts = list(sched.table.contexts)     # a copy: the worker thread changes them
    now = time.monotonic()   # each one's last use goes with it, as its park at the stop passes it on
    live = [(len(contexts[i].tokens), idle_s(contexts[i], now)) for i in reversed(stop_order(contexts))
            if parkable(contexts[i]) and not held_by_another(contexts, i)]
    return {"keeps_on_disk": True, "conversations": cache.stop_would_keep(live)}


def model_quant(engine: Any) -> str | None:
    """The loaded model's quantization as `strata models` names it: its `general.file_type`, else (a file
    without one) its commonest matrix type, which reads the file's header and checks the file: called once,
    at load. Each snapshot did it, 0.2 s of the event loop on the default model, four times a second."""
    q = getattr(engine, "quant", None)
    if q:
        return str(q)
    try:
        from strata.engine.models import describe_model, quant_name

        metadata = getattr(engine, "metadata", None) or {}
        if metadata.get("general.file_type") is not None:
            return quant_name(metadata, ())
        return describe_model(engine.model_path).quant
    except Exception:
        return None


async def monitor(request: web.Request) -> web.Response:
    return web.json_response(snapshot(request.app[STATE], stop=True), dumps=_dumps)


async def monitor_events(request: web.Request) -> web.StreamResponse:
    """`event: snapshot` at most 4 a second (default 1 a second; `?interval=0.25` asks for the maximum)."""
    raw = request.query.get("interval", "1")
    try:
        interval = float(raw)
    except ValueError:
        interval = float("nan")
    if not math.isfinite(interval) or interval <= 0:
        raise APIError(400, f"'interval' must be a number of seconds above 0; got {raw!r}", param="interval")
    interval = max(1.0 / MAX_EVENTS_PER_S, min(interval, 60.0))
    resp = await open_sse(request)
    state = request.app[STATE]
    try:
        while not state.stopping:
            if not _client_behind(request):
                await send_sse(resp, _dumps(snapshot(state)), "snapshot")
            for _ in range(max(1, int(interval / 0.25))):
                if state.stopping:
                    break
                await asyncio.sleep(min(interval, 0.25))
    except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
        pass
    return resp


def _client_behind(request: web.Request) -> bool:
    """Whether the client has not yet taken the last snapshot off the socket (socket_queue.unsent_bytes: the
    transport's buffer and, on Linux and macOS, the kernel's send queue). A tick then writes nothing, so a slow
    reader (a monitor on a busy machine, a slow link) reads recent snapshots, not a backlog: written regardless,
    the send buffer (up to 4 MiB on Linux) held minutes of them (a soak: 186 s behind after 3.5 min at 8 KiB/s,
    benchmarks/RESULTS.md "Agent soak")."""
    return unsent_bytes(request.transport) > 0


async def slots(request: web.Request) -> web.Response:
    state = ready_state(request)
    sched = state.scheduler
    return web.json_response({"slots": [_drop_none(s) for s in sched.slots_view()],
                              "decisions": [dict(d) for d in list(sched.placer.trace)]}, dumps=_dumps)


def _dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str)
