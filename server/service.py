"""Server-wide handlers and middlewares: `GET /health`, `GET /metrics`, the API-key check and the error
middleware that answers every failure as JSON in the shape of the API the path belongs to.

Not here: the APIs themselves (openai_api, anthropic_api), the application factory (app.py).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from strata.server.errors import APIError, api_of_path, error_body, error_response
from strata.server.keys import STATE
from strata.server.metrics import render_prometheus
from strata.server.stop_progress import handler_cut_line

log = logging.getLogger("strata.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# /api/hello: Claude Code's reachability probe of its base URL (a HEAD at start-up, a GET in its
# connectivity check), sent without the key, as Anthropic's API answers it
OPEN_PATHS = ("/health", "/api/hello")


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.load_error:
        return web.json_response({"status": "error", "error": state.load_error}, status=503)
    if not state.ready:
        return web.json_response({"status": "loading"}, status=503, headers={"Retry-After": "1"})
    return web.json_response({"status": "ok", "model": state.model_name})


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    sched = state.scheduler
    e = state.engine
    model = None if e is None else {
        "name": state.model_name, "arch": getattr(e, "arch", None), "backend": getattr(e, "backend", None),
        "n_expert": getattr(e, "n_expert", 0), "n_expert_used": getattr(e, "n_expert_used", 0)}
    text = render_prometheus(state.metrics.snapshot(), sched.slots_view() if sched else [],
                             sched.queue_depth if sched else 0, sched.in_flight if sched else 0, model)
    if state.cache is not None and hasattr(state.cache, "metrics_text"):
        try:
            text += state.cache.metrics_text()
        except Exception:
            log.exception("cache metrics failed")
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


def presented_key(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key")


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    key = request.app[STATE].config.api_key
    if key and request.path not in OPEN_PATHS:
        given = presented_key(request)
        # a header's bytes that are not UTF-8 come as surrogate escapes: compared as the bytes sent
        if given is None or not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), key.encode()):
            request.app[STATE].metrics.add_rejected("auth")
            what = "no API key was given" if given is None else "the API key is not valid"
            raise APIError(401, f"{what}; send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'",
                           headers={"WWW-Authenticate": "Bearer"})
    return await handler(request)


# the server's address as printed (`listening on http://127.0.0.1:8080`), opened in a browser or probed as a base URL
ROOT_PATHS = ("/", "/v1", "/v1/")


def _base_url_hint(path: str) -> str:
    """A client whose base URL already ends in /v1 asks for /v1/v1/...: the Anthropic SDK's base URL
    is the server's address alone (the OpenAI SDK's ends in /v1). The address itself (a new user opened
    it in a browser: a bare "no endpoint GET /") says what is served."""
    if path in ROOT_PATHS:
        return (" (this is Strata's HTTP API, not a page: GET /health and /v1/models; POST /v1/chat/completions "
                "and /v1/responses, the OpenAI SDK's base URL http://HOST:PORT/v1; POST /v1/messages, the "
                "Anthropic SDK's http://HOST:PORT; the live view: `strata monitor`; docs/api.md)")
    if not path.startswith("/v1/v1/"):
        return ""
    return (" (the client's base URL ends in /v1 once too often: the Anthropic SDK takes "
            "http://HOST:PORT, the OpenAI SDK http://HOST:PORT/v1; docs/api.md)")


async def answer_then_close(request: web.Request, resp: web.StreamResponse) -> None:
    """Send `resp` now, then close the connection: the request's body was not read whole (its framing broke,
    it stopped arriving, it does not inflate), so what follows on the connection is no request, and aiohttp
    would otherwise linger up to 10 s reading the rest before closing."""
    await resp.prepare(request)
    await resp.write_eof()
    request.protocol.force_close()


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    api = api_of_path(request.path)
    transport = request.transport   # taken now: aiohttp lets go of it when it cancels the handler at a stop
    try:
        return await handler(request)
    except APIError as e:
        if e.status < 500:
            request.app[STATE].metrics.add_rejected("bad_request" if e.status != 401 else "auth")
        if e.code == "context_length_exceeded":
            # the client may show its own wording without the fix (Claude Code's "Prompt is too long · the
            # request is ~12364 tokens (limit 8191) ..."): the server's own log says what to do
            log.warning("%s %s refused: %s", request.method, request.path, e.message)
        resp = error_response(api, e)
        if e.headers.get("Connection", "").lower() == "close":
            await answer_then_close(request, resp)
        return resp
    except web.HTTPException as e:
        if e.status < 400:
            raise
        message = {404: f"no endpoint {request.method} {request.path}{_base_url_hint(request.path)}",
                   405: f"method {request.method} is not allowed on {request.path}",
                   413: "the request body is larger than the server's limit (--max-body-mib)"}.get(e.status, e.reason)
        return web.json_response(error_body(api, e.status, message), status=e.status)
    except (ConnectionResetError, ConnectionError):
        raise
    except asyncio.CancelledError:
        if request.app[STATE].stopping:   # aiohttp's wait for handlers at a stop ran out (stop_progress)
            unsent = transport.get_write_buffer_size() if transport is not None else 0
            log.warning("%s", handler_cut_line(request.method, request.path, unsent))
        raise
    except Exception as e:
        log.exception("request %s %s failed", request.method, request.path)
        return web.json_response(error_body(api, 500, f"internal error: {type(e).__name__}: {e}"), status=500)
