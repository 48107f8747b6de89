"""The Responses API over a WebSocket, `GET /v1/responses` with an upgrade: the transport the OpenAI Agents
SDK uses when told to (`set_default_openai_responses_transport("websocket")`) and Codex can use.

The client sends `{"type": "response.create", ...}` text frames, each a Responses request body (the same
fields as `POST /v1/responses`; `stream` is implied); the server answers each with the same events the
SSE stream carries, one JSON text frame an event, ending with response.completed (or .incomplete /
.failed). Requests on one connection are answered one after the other. A bad request is an
`{"type": "error", "status": 400, "error": {...}}` frame and the connection stays open for the next; so is a
request refused by a full queue or a stopping server (also one still queued when the stop came), `status` 503
with `error.headers` {"retry-after": ...}, as over HTTP.
As over HTTP, nothing is stored: `previous_response_id` is refused and every request carries its whole
conversation; the history is reused from its slot or the conversation cache all the same. Closing the
socket cancels the response being written.

Not here: the request's meaning and the events (responses_api.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import WSCloseCode, WSMessage, WSMsgType, web
from strata.server import fields as f
from strata.server.errors import APIError, error_body
from strata.server.openai_api import ready_state
from strata.server.responses_api import Events, answer, refuse_stored
from strata.server.socket_queue import count_sent

log = logging.getLogger("strata.server")

STOP_CHECK_S = 0.25   # how often an idle socket looks whether the server is stopping


async def responses_socket(request: web.Request) -> web.StreamResponse:
    state = ready_state(request)       # a 503 while loading, before the upgrade
    ws = web.WebSocketResponse(max_msg_size=max(1024, int(state.config.max_body_mib * 2**20)))   # --max-body-mib
    if not ws.can_prepare(request).ok:
        raise APIError(405, "GET /v1/responses is the Responses API over a WebSocket (an Upgrade: websocket "
                            "request); send requests with POST /v1/responses")
    await ws.prepare(request)
    # frames are read while an answer is written, so that a close cancels it at once (the client's close
    # frame would wait unread until the answer ended, and the socket stays open meanwhile)
    frames: asyncio.Queue = asyncio.Queue()
    answering: list[asyncio.Future] = []

    async def read() -> None:
        try:
            async for msg in ws:
                frames.put_nowait(msg)
        finally:
            for task in answering:
                task.cancel()
            frames.put_nowait(None)

    async def next_frame() -> WSMessage | None:
        while not state.stopping:     # set at shutdown: an idle socket would hold the server's stop
            try:
                return await asyncio.wait_for(frames.get(), STOP_CHECK_S)
            except asyncio.TimeoutError:
                continue
        return None

    reader = asyncio.ensure_future(read())
    try:
        while (msg := await next_frame()) is not None:
            task = asyncio.ensure_future(_answer_frame(request, state, ws, msg))
            answering.append(task)
            try:
                await asyncio.wait([task])
            finally:
                answering.clear()
                if not task.done():
                    task.cancel()
            if task.cancelled():
                log.info("responses socket closed while answering: the answer is cancelled")
                break
            task.result()
        if not ws.closed:
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server stopping")
    finally:
        reader.cancel()
    return ws


async def _answer_frame(request: web.Request, state: Any, ws: web.WebSocketResponse, msg: WSMessage) -> None:
    if msg.type != WSMsgType.TEXT:
        await _send_error(ws, APIError(400, "frames must be JSON text"))
        return
    try:
        await answer(request, state, _request_body(msg.data), Events(ws, _writer(request, ws)))
    except APIError as e:
        await _send_error(ws, e)
    except (ConnectionResetError, ConnectionError):
        pass      # the socket is closing: its reader ends the loop


def _request_body(text: str) -> dict:
    """The Responses body of one `response.create` frame (checked as POST /v1/responses checks it: its JSON
    by fields.parse_json_body, whose depth bound keeps a deep frame from raising RecursionError out of
    the socket, and whose mending reads a lone surrogate escape as U+FFFD)."""
    try:
        frame = f.parse_json_body(text.encode("utf-8", "surrogatepass"))
    except APIError as e:
        raise APIError(400, e.message.replace("the request body is not valid JSON", "the frame is not JSON")
                       .replace("the request body", "the frame"), param=e.param) from None
    if not isinstance(frame, dict):
        raise APIError(400, "a frame must be a JSON object")
    if frame.get("type") != "response.create":
        raise APIError(400, f"frame type {frame.get('type')!r} is not supported; send 'response.create'",
                       param="type")
    body = {k: v for k, v in frame.items() if k not in ("type", "stream")}
    refuse_stored(body)
    return body


def _writer(request: web.Request, ws: web.WebSocketResponse):
    async def write(event: dict) -> None:
        frame = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        count_sent(request, len(frame))   # characters <= bytes: never more taken than it took (--answer-unread-s)
        await ws.send_str(frame)
    return write


def error_frame(e: APIError) -> dict:
    """A refused request's frame, `{"type": "error", "status", "error": {...}}`; a refusal that is to be retried
    (503: the queue full, the server stopping) carries its Retry-After in `error.headers`, where the openai SDK's
    ResponseWsError keeps the headers an error came with (HTTP has them on the response)."""
    frame = {"type": "error", "status": e.status, **error_body("openai", e.status, e.message, e.param, e.code)}
    headers = {k.lower(): v for k, v in e.headers.items() if k.lower() != "connection"}   # HTTP's own, not the frame's
    if headers:
        frame["error"]["headers"] = headers
    return frame


async def _send_error(ws: web.WebSocketResponse, e: APIError) -> None:
    log.info("responses socket: %s %s", e.status, e.message)
    if not ws.closed:
        await ws.send_json(error_frame(e))
