"""HTTP errors in each API's own shape: OpenAI's `{"error": {...}}` and Anthropic's `{"type": "error", ...}`.

`APIError` is raised anywhere in request handling; the middleware in server/app.py renders it for the
API the path belongs to. This module only shapes errors; it decides nothing about requests.
"""

from __future__ import annotations

from aiohttp import web

# HTTP status -> (OpenAI error type, Anthropic error type)
_TYPES: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("authentication_error", "authentication_error"),
    403: ("permission_error", "permission_error"),
    404: ("not_found_error", "not_found_error"),
    405: ("invalid_request_error", "invalid_request_error"),
    408: ("invalid_request_error", "invalid_request_error"),
    413: ("invalid_request_error", "request_too_large"),
    415: ("invalid_request_error", "invalid_request_error"),
    422: ("invalid_request_error", "invalid_request_error"),
    429: ("rate_limit_error", "rate_limit_error"),
    500: ("server_error", "api_error"),
    503: ("server_error", "overloaded_error"),
}


class APIError(Exception):
    """A request that cannot be served; `message` says what is wrong, `param` names the field."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param)


def api_of_path(path: str) -> str:
    """"anthropic" for /v1/messages*, else "openai" (the shape every other endpoint uses)."""
    return "anthropic" if path.startswith("/v1/messages") else "openai"


MAX_MESSAGE_CHARS = 2000   # a message quoting a client's 3 MB 'role' is 3 MB; its start and end say what is wrong


def shortened(message: str) -> str:
    """`message`, its middle cut when it is longer than MAX_MESSAGE_CHARS (the place and the rule stay)."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    cut = len(message) - 1500
    return f"{message[:1000]}... ({cut} characters cut) ...{message[-500:]}"


def error_body(api: str, status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    message = shortened(message)
    openai_type, anthropic_type = _TYPES.get(status, ("invalid_request_error", "invalid_request_error"))
    if api == "anthropic":
        return {"type": "error", "error": {"type": anthropic_type, "message": message}}
    return {"error": {"message": message, "type": openai_type, "param": param, "code": code}}


def error_response(api: str, err: APIError) -> web.Response:
    resp = web.json_response(error_body(api, err.status, err.message, err.param, err.code), status=err.status,
                             headers=err.headers)
    if err.headers.get("Connection", "").lower() == "close":
        resp.force_close()   # the header alone is sent, but aiohttp would read on: what follows is not a request
    return resp
