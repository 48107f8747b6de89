"""The session HTTP endpoints, as routes the server mounts with `add_session_routes(app)`.

What this is: thin aiohttp handlers (parse, call the cache in a worker thread, serialise):
`POST /v1/sessions/{name}/save`, `POST /v1/sessions/{name}/restore`, `DELETE /v1/sessions/{name}`,
`GET /v1/sessions`. The body of save/restore may name the context: `{"slot": 2}` or
`{"slot": "main"}` (default main). A save's body may name the conversation instead, or besides as a guard:
`messages`, `tokens` or `conversation` (server/history_save.py; held nowhere a 404, a slot another request took a
409). A save under a name that differs only in case from a saved session's is a 409; one past the sessions folder's
budget (--conversation-cache-sessions-mib) a 507 `storage_error` saying what frees room.
Sessions are per model: a restore or DELETE of a name only another model saved a session under is a 409 naming it. A restore of a session an older Strata saved reads its tokens again
(`"rebuilt": true`); one whose sidecar does not check is a 409, one longer than the context a 400. What this is not: the scheduler. The server sets
`app[SESSION_BACKEND]` to an object with `save_session(name, ctx)`, `restore_session(name, ctx)`,
`delete_session(name)`, `list_sessions()` (the ConversationCache itself, or a wrapper that holds the
scheduler's lock on that context while it runs).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any

from aiohttp import web
from strata.server.body_read import read_body
from strata.server.errors import shortened
from strata.server.fields import parse_json_body, refused_encoding
from strata.server.history_save import HistoryNotFoundError, SaveTarget, SlotTakenError

from .sessions import (
    SessionConflictError,
    SessionNameError,
    SessionsFolderFullError,
    StaleSessionError,
    validate_session_name,
)

SESSION_BACKEND: web.AppKey = web.AppKey("strata_session_backend", object)
SESSION_THREADS: web.AppKey = web.AppKey("strata_session_threads", concurrent.futures.ThreadPoolExecutor)
# Threads for the save, restore and DELETE calls, which may wait long: a save or restore for its context to be idle
# (SESSION_IDLE_WAIT_S, 30 s), a DELETE for a removal that hangs. On the event loop's default executor (min(32,
# cores + 4) threads: 6 on two cores) that many waiting calls held up every chat prompt's rendering and the stop,
# which run there. 32: more waiting calls than that queue behind each other, not behind anything else.
N_SESSION_THREADS = 32
# what a save's body may name instead of only a context (server/history_save.py)
SAVE_TARGETS = ("messages", "tokens", "conversation")


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    # the OpenAI error shape the other endpoints use (errors.py), with this API's own types; a message quoting a
    # huge name or conversation key cut as theirs are (it was sent back whole: 20,000 characters for one key)
    return web.json_response({"error": {"message": shortened(message), "type": kind, "param": None, "code": None}},
                             status=status)


async def _body(request: web.Request) -> dict:
    """The JSON object the call's body holds ({} for none or null)."""
    if not request.can_read_body:
        return {}
    refused = refused_encoding(request)
    if refused:
        raise ValueError(refused)
    raw = await read_body(request)   # an APIError (broken framing, stalled, over the limit) is the middleware's
    # read as the APIs read theirs (an APIError too): a lone surrogate mended to U+FFFD (a save's `messages` are
    # rendered and tokenized: one unmended was a 500), NaN / Infinity and nesting past 100 refused
    body = parse_json_body(raw)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    return body


def _ctx_of(body: dict) -> int:
    slot = body.get("slot", "main")
    if slot == "main":
        return 0
    if isinstance(slot, bool) or not isinstance(slot, int) or slot < 1:
        raise ValueError(f"slot must be \"main\" or a slot number >= 1, got {slot!r}")
    return slot


async def _ctx_from_body(request: web.Request) -> int:
    return _ctx_of(await _body(request))


def _save_target(body: dict) -> SaveTarget | None:
    """What a save's body names besides its slot: `messages`, `tokens` or `conversation` (one of them), or None."""
    named = [k for k in SAVE_TARGETS if body.get(k) is not None]
    if not named:
        return None
    if len(named) > 1:
        raise ValueError(f"name the conversation to save one way: {' or '.join(repr(k) for k in named)}, not both")
    value = body[named[0]]
    if named[0] == "conversation":
        if not isinstance(value, str) or not value:
            raise ValueError(f"conversation must be a conversation key as /v1/slots shows it, got {value!r}")
        return SaveTarget(conversation=value, body=body)
    if not isinstance(value, list) or not value:
        raise ValueError(f"{named[0]} must be a non-empty array, got {_short(value)}")
    if named[0] == "tokens" and not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise ValueError(f"tokens must be an array of token ids (integers), got {_short(value)}")
    return SaveTarget(messages=value, body=body) if named[0] == "messages" else SaveTarget(tokens=value, body=body)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


async def save_session(request: web.Request) -> web.Response:
    try:
        name = validate_session_name(request.match_info["name"])
        body = await _body(request)
        target = _save_target(body)
        # with a conversation named, a slot named is a guard (it must still hold it); none: wherever it is
        ctx = _ctx_of(body) if target is None or "slot" in body else None
    except (SessionNameError, ValueError) as exc:
        return _error(400, str(exc))
    backend = request.app[SESSION_BACKEND]
    args = (name, ctx) if target is None else (name, ctx, target)
    try:
        info = await _in_session_thread(request, backend.save_session, *args)
    except MemoryError as exc:
        return _error(503, f"not enough RAM to save: {exc}", "overloaded_error")
    except SessionConflictError as exc:
        return _error(409, str(exc), "conflict_error")
    except SlotTakenError as exc:
        return _error(409, str(exc), "conflict_error")
    except HistoryNotFoundError as exc:
        return _error(404, str(exc), "not_found_error")
    except (ValueError, IndexError) as exc:
        return _error(400, str(exc))
    except SessionsFolderFullError as exc:   # the folder's budget (--conversation-cache-sessions-mib): says what frees it
        return _error(507, str(exc), "storage_error")
    except OSError as exc:
        return _error(507, f"could not write the session (a session saved before under this name is kept as it was): "
                           f"{exc}", "storage_error")
    return web.json_response(info)


async def restore_session(request: web.Request) -> web.Response:
    try:
        name = validate_session_name(request.match_info["name"])
        ctx = await _ctx_from_body(request)
    except (SessionNameError, ValueError) as exc:
        return _error(400, str(exc))
    backend = request.app[SESSION_BACKEND]
    try:
        res = await _in_session_thread(request, backend.restore_session, name, ctx)
    except KeyError as exc:
        said = exc.args[0] if exc.args and isinstance(exc.args[0], str) else f"no session named {name!r}"
        return _error(404, said, "not_found_error")
    except StaleSessionError as exc:
        return _error(409, str(exc), "restore_error")
    except SessionConflictError as exc:   # only another model saved a session of this name
        return _error(409, str(exc), "conflict_error")
    except (ValueError, IndexError) as exc:
        return _error(400, str(exc))
    if hasattr(res, "save_error"):   # an older Strata's session, read again from its tokens
        return web.json_response({"name": name, "n_tokens": res.n_tokens, "seconds": round(res.seconds, 6),
                                  "rebuilt": True, "tokens_read": res.n_tokens,
                                  "saved_again": res.save_error is None, "save_error": res.save_error})
    if res.n_tokens == 0:
        return _error(409, f"session {name!r} could not be restored: {res.reason}", "restore_error")
    return web.json_response({"name": name, "n_tokens": res.n_tokens, "seconds": round(res.seconds, 6),
                              "floor": res.floor, "ladder": res.ladder, "reason": res.reason, "rebuilt": False})


async def delete_session(request: web.Request) -> web.Response:
    try:
        name = validate_session_name(request.match_info["name"])
    except SessionNameError as exc:
        return _error(400, str(exc))
    try:
        existed = await _in_session_thread(request, request.app[SESSION_BACKEND].delete_session, name)
    except SessionConflictError as exc:   # only another model saved a session of this name: it is left as it is
        return _error(409, str(exc), "conflict_error")
    except OSError as exc:   # a folder that cannot be written: the session stays (listed, restorable)
        return _error(507, f"could not delete the session: {exc}", "storage_error")
    if not existed:
        return _error(404, f"no session named {name!r}", "not_found_error")
    return web.json_response({"name": name, "deleted": True})


async def list_sessions(request: web.Request) -> web.Response:
    sessions = await asyncio.to_thread(request.app[SESSION_BACKEND].list_sessions)
    return web.json_response({"object": "list", "data": sessions})


async def _in_session_thread(request: web.Request, fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(request.app[SESSION_THREADS], fn, *args)


async def _shut_session_threads(app: web.Application) -> None:
    # not waited for: a call still waiting ends with the scheduler's stop, a hung removal is given up by the close
    app[SESSION_THREADS].shutdown(wait=False)


def add_session_routes(app: web.Application) -> None:
    app[SESSION_THREADS] = concurrent.futures.ThreadPoolExecutor(N_SESSION_THREADS, thread_name_prefix="strata-session")
    app.on_cleanup.append(_shut_session_threads)
    app.router.add_post("/v1/sessions/{name}/save", save_session)
    app.router.add_post("/v1/sessions/{name}/restore", restore_session)
    app.router.add_delete("/v1/sessions/{name}", delete_session)
    app.router.add_get("/v1/sessions", list_sessions)
