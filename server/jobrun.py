"""Running one job from an HTTP handler: submit it to the scheduler, read its events, notice a client
that went away or stopped reading (and cancel its job), write server-sent events. Shared by both APIs' handlers.

Not here: request parsing or response shapes (openai_api / anthropic_api), scheduling (scheduler).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from aiohttp import web
from strata.server import unread_answer
from strata.server.errors import APIError
from strata.server.jobs import Completion, Job
from strata.server.keys import REQUEST_ID, served_option
from strata.server.socket_queue import measure

log = logging.getLogger("strata.server")

CLIENT_CHECK_S = 0.25

# the request's number in the log, /v1/slots' decisions and /v1/monitor's requests[], sent back to its client
# as this header (the answer's own id, chatcmpl-... or msg_..., is named nowhere on the server's side)
REQUEST_HEADER = "X-Strata-Request"

if hasattr(asyncio, "timeout"):       # Python 3.11+
    async def _get_within(queue: asyncio.Queue, timeout: float) -> Any:
        """queue.get(), TimeoutError after `timeout`, awaited in the handler's own task: an event wakes the
        handler at once (asyncio.wait_for runs the get in a task of its own, two more turns of the event
        loop and a task for every event)."""
        async with asyncio.timeout(timeout):
            return await queue.get()
else:  # pragma: no cover - Python 3.10
    async def _get_within(queue: asyncio.Queue, timeout: float) -> Any:
        return await asyncio.wait_for(queue.get(), timeout)


def client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


class JobEvents:
    """Async iterator over a submitted job's events ("start", "text", "done"). Closing it before "done"
    cancels the job; so does the client disconnecting while it waits, or taking none of what was written
    for --answer-unread-s (looked at on a timer until closed: the handler may be stuck writing to it)."""

    def __init__(self, request: web.Request, scheduler: Any, job: Job, *, stream: bool = True,
                 keepalive_s: float | None = None) -> None:
        job.stream = stream
        self.request = request
        self.scheduler = scheduler
        self.job = job
        self.done = False
        # with keepalive_s, ("keepalive", None) comes after that long without an event (a long prompt being
        # read sends none), so that a stream can tell its client it is alive
        self.keepalive_s = keepalive_s
        self._last_event = time.monotonic()
        job.loop = asyncio.get_running_loop()
        job.events = asyncio.Queue()
        scheduler.submit(job)          # raises APIError(503) when the queue is full
        request[REQUEST_ID] = job.id   # only now: a refused job is in no log line, decision or monitor entry
        self.unread_s = float(served_option(request.app, "answer_unread_s"))   # --answer-unread-s
        self._reading: unread_answer.Reading | None = None
        self._look_timer: asyncio.TimerHandle | None = None
        if self.unread_s > 0 and stream:   # an answer not streamed is not being sent: none to take
            self._look_timer = job.loop.call_later(CLIENT_CHECK_S, self._look_at_reading)

    def __aiter__(self) -> JobEvents:
        return self

    async def __anext__(self) -> tuple[str, Any]:
        if self.done:
            raise StopAsyncIteration
        assert self.job.events is not None
        while True:
            try:
                kind, payload = self.job.events.get_nowait()
            except asyncio.QueueEmpty:
                try:
                    kind, payload = await _get_within(self.job.events, CLIENT_CHECK_S)
                except asyncio.TimeoutError:
                    self._cancel_if_client_gone()
                    if self.keepalive_s is not None and time.monotonic() - self._last_event >= self.keepalive_s:
                        self._last_event = time.monotonic()
                        return "keepalive", None
                    continue
            if kind == "done":
                self.done = True
            else:
                # events that keep coming never let the wait above time out: a stream whose text is held
                # back (a tool call being written) writes nothing that could fail, so look here too
                self._cancel_if_client_gone()
            self._last_event = time.monotonic()
            return kind, payload

    def _cancel_if_client_gone(self) -> None:
        if not self.job.cancelled and client_gone(self.request):
            self.scheduler.cancel(self.job)

    def _look_at_reading(self) -> None:
        """Every CLIENT_CHECK_S until closed: a client that took none of the answer for --answer-unread-s is
        gone. Its connection is aborted (closing would wait to send what it does not read), which also wakes
        a handler stuck writing to it."""
        self._look_timer = None
        transport = self.request.transport
        if transport is None or transport.is_closing():
            self._cancel_if_client_gone()
            return
        now = time.monotonic()
        unsent, taken = measure(self.request)
        self._reading = (unread_answer.first_look(now, unsent, taken) if self._reading is None
                         else unread_answer.look(self._reading, now, unsent, taken))
        if unread_answer.gone_unread(self._reading, now, self.unread_s):
            log.info("request %s: its client took none of the answer for %g s (--answer-unread-s), %d bytes "
                     "waiting: ended, its connection closed", self.job.id, self.unread_s, unsent)
            if not self.job.cancelled:
                self.scheduler.cancel(self.job)
            transport.abort()
            return
        self._look_timer = self.job.loop.call_later(CLIENT_CHECK_S, self._look_at_reading)

    def close(self) -> None:
        if self._look_timer is not None:
            self._look_timer.cancel()
            self._look_timer = None
        if not self.done:
            self.scheduler.cancel(self.job)
            self.done = True

    async def until_done(self) -> tuple[Any, dict]:
        """Waits for the end (non-streaming; create the job with stream=False); returns (completion, start)."""
        start: dict = {}
        try:
            async for kind, payload in self:
                if kind == "start":
                    start = payload
                elif kind == "done":
                    return payload, start
        finally:
            self.close()
        raise RuntimeError("job ended without a completion")


def failed(c: Completion) -> bool:
    """An error, or a request cut off by the server stopping (cancelled with a reason): a stream must not
    end such an answer as a normal one, or the client takes the cut text as complete."""
    return c.finish_reason == "error" or (c.finish_reason == "cancelled" and bool(c.error))


def failure(c: Completion) -> APIError | None:
    """What a failed answer answers: 500 for an error, 503 (retry) when the server was stopping; None when it
    did not fail. A stream that has begun sends it as an error event (in its API's shape)."""
    if c.finish_reason == "error":
        return APIError(500, c.error or "generation failed")
    if c.finish_reason == "cancelled" and c.error:
        return APIError(503, c.error, headers={"Retry-After": "5"})
    return None


def raise_if_failed(c: Completion) -> None:
    """For an answer not streamed, or a stream that has sent nothing yet: its `failure`, raised."""
    err = failure(c)
    if err is not None:
        raise err


async def name_request(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: an answer (or a later refusal) of a request whose job was queued carries its number."""
    job_id = request.get(REQUEST_ID)
    if job_id is not None:
        response.headers[REQUEST_HEADER] = str(job_id)


async def open_sse(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(status=200, headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    await resp.prepare(request)
    return resp


async def send_keepalive(resp: web.StreamResponse) -> None:
    """An SSE comment: bytes for the client's read timeout, no event for its parser."""
    await resp.write(b": keepalive\n\n")


async def send_sse(resp: web.StreamResponse, data: Any, event: str | None = None) -> None:
    """One event; raises ConnectionResetError when the client went away."""
    body = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    await resp.write(f"{head}data: {body}\n\n".encode())
