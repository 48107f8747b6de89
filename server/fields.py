"""Typed reads of JSON request fields, each failing with a 400 that names the field and what is wrong.

Shared by openai_api and anthropic_api; knows nothing of either API's meaning of a field.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from strata.server.body_read import read_body
from strata.server.errors import APIError

log = logging.getLogger("strata.server")

MAX_TOKENS_LIMIT = 1 << 20   # a max_tokens above this is a client bug, not a wish


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object; 400 for anything else (body_read.read_body: 400 for broken framing, 408
    for a body that stopped arriving, 413 over the limit)."""
    ctype = request.content_type
    if ctype not in ("application/json", "", "application/octet-stream", "text/plain"):
        hint = " (curl -d sends a form: add -H 'Content-Type: application/json')" \
            if ctype == "application/x-www-form-urlencoded" else ""
        raise APIError(415, f"expected Content-Type application/json, got {ctype}{hint}")
    refused = refused_encoding(request)
    if refused:
        raise APIError(415, refused)
    raw = await read_body(request)   # 400 / 408 / 413 for a body that cannot be read whole
    if not raw.strip():
        raise APIError(400, "the request body is empty; expected a JSON object")
    body = parse_json_body(raw)
    if not isinstance(body, dict):
        raise APIError(400, f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def refused_encoding(request: web.Request) -> str:
    """Why the body's Content-Encoding is refused, or "": only gzip (and none) are read, by body_read (the
    server's parser decodes no body). aiohttp's own deflate reading left a damaged body that came after its
    headers unanswered for ever, and one that came with them got its plain-text 400."""
    given = [e.strip().lower() for e in request.headers.get("Content-Encoding", "").split(",") if e.strip()]
    other = [e for e in given if e not in ("gzip", "x-gzip", "identity")]
    if not other:
        if sum(e != "identity" for e in given) > 1:   # gzip applied twice: body_read inflates one
            return (f"Content-Encoding {', '.join(given)} is not accepted: send the body as it is, or gzip it "
                    "once")
        return ""
    return f"Content-Encoding {', '.join(other)} is not accepted: send the body as it is, or gzip it"


MAX_JSON_DEPTH = 100   # arrays and objects inside each other; a real request (tool schemas included) nests < 20
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json_body(raw: bytes) -> Any:
    """`raw` decoded as JSON text; 400 saying what is wrong for invalid UTF-8 or JSON and for nesting
    deeper than MAX_JSON_DEPTH (Python's decoder raises RecursionError near 1,000 levels, and the
    templates and tokenizers that read the body recurse too), and for NaN or Infinity anywhere (Python's
    decoder reads them, RFC 8259 has none: a Responses answer echoing the request's tools would carry
    them to a strict client, which cannot parse it). A lone UTF-16 surrogate (a `\\ud800` escape
    without its pair, what a JavaScript agent sends when it cuts a tool's output inside an emoji) becomes
    U+FFFD, as a UTF-8 decoder does with a broken byte: no UTF-8 text can carry it to the tokenizer, and
    a 400 would stop the agent's session, which resends the same text every turn."""
    try:
        # decoded strictly: json.loads(bytes) decodes UTF-8 with 'surrogatepass', so a surrogate written as UTF-8
        # bytes (ED A0 80, which no UTF-8 decoder takes) came through unmended and failed the tokenizer (a 500)
        text = raw.decode(json.detect_encoding(raw))
        body = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise APIError(400, f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise APIError(400, f"the request body nests arrays or objects more than {MAX_JSON_DEPTH} deep") from None
    # looked for in the text, not the bytes: a UTF-16 / UTF-32 body's escape is not these ASCII bytes in a row
    mended = _check_depth_and_mend_text(body, _SURROGATE_ESCAPE.search(text) is not None)
    if mended:
        log.info("the request body held %d string(s) with a lone UTF-16 surrogate: each read with U+FFFD "
                 "in its place", mended)
    return _mend(body) if isinstance(body, str) else body


def _check_depth_and_mend_text(body: Any, surrogates: bool) -> int:
    """400 naming the place of the first value nested past MAX_JSON_DEPTH or of a number that is not
    finite; with `surrogates` (the raw
    body has a surrogate escape at all: raw UTF-8 cannot hold one) each string and key with a lone
    surrogate is mended in place. Returns how many were. Iterative, and a place's name is built only for
    the error (a prompt of many token ids costs one pass)."""
    mended = 0
    stack: list[tuple[Any, int, tuple | None]] = [(body, 0, None)] if isinstance(body, (dict, list)) else []
    # (container, depth, (key, parent's link))
    while stack:
        v, depth, link = stack.pop()
        if depth >= MAX_JSON_DEPTH:
            where = _place(link)
            raise APIError(400, f"the request body nests arrays or objects more than {MAX_JSON_DEPTH} deep "
                                f"(at {where or 'the top'})", param=where or None)
        kinds = (dict, list, float, str) if surrogates else (dict, list, float)
        if isinstance(v, dict):
            items = list(v.items())
            if surrogates and any(_mend(k) is not k for k in v):
                mended += sum(_mend(k) is not k for k in v)
                items = [(_mend(k), x) for k, x in items]
                v.clear()
                v.update(items)
        else:                       # scalars skipped in one comprehension (a prompt of token ids)
            items = [(i, x) for i, x in enumerate(v) if isinstance(x, kinds)]
        for k, item in reversed(items):
            if isinstance(item, str):
                if surrogates and (fixed := _mend(item)) is not item:
                    v[k] = fixed
                    mended += 1
            elif isinstance(item, (dict, list)):
                stack.append((item, depth + 1, (k, link)))
            elif isinstance(item, float) and not math.isfinite(item):
                where = _place((k, link))
                raise APIError(400, f"{where}: {_type_name(item)} is not a JSON number (JSON numbers are finite; "
                                    "a number past 1.8e308 reads as Infinity)", param=where)
    return mended


def _mend(s: str) -> str:
    """`s` itself when it is valid Unicode text, else a copy with U+FFFD for each lone surrogate."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _place(link: tuple | None) -> str:
    """`messages[0].content` from the chain of keys (innermost first) that leads to a value."""
    keys = []
    while link is not None:
        keys.append(link[0])
        link = link[1]
    out = ""
    for k in reversed(keys):
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else k)
    return out if len(out) <= 120 else out[:60] + "..." + out[-57:]


def _type_name(v: Any) -> str:
    if isinstance(v, float) and not v.is_integer():   # NaN, Infinity (JSON extensions Python reads) and 3.5
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(repr(v), repr(v))
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number" if isinstance(v, (int, float)) else type(v).__name__)


def _get_typed(body: dict, name: str, kind: type, what: str, *, required: bool = False) -> Any:
    """`body[name]` when it is a `kind`; None when absent or null (400 when `required`); 400 otherwise."""
    v = body.get(name)
    if v is None:
        if required:
            raise APIError(400, f"'{name}' is required", param=name)
        return None
    if not isinstance(v, kind):
        raise APIError(400, f"'{name}' must be {what}, got {_type_name(v)}", param=name)
    return v


def shown(v: Any) -> str:
    """A client's value as an error message shows it: a string or other scalar as its JSON (cut past
    SHOWN_CHARS), an object or an array by its kind."""
    if isinstance(v, (dict, list)):
        return "an object" if isinstance(v, dict) else "an array"
    text = json.dumps(v, ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 4] + '..."'


SHOWN_CHARS = 60


def wrong_type(place: str, what: str, v: Any) -> APIError:
    """The 400 for a value of the wrong type: `messages[3].content[0].is_error: expected a boolean, got "yes"`,
    worded alike for a field wherever it appears."""
    return APIError(400, f"{place}: expected {what}, got {shown(v)}", param=place)


def field(obj: dict, where: str, key: str, kind: type | tuple[type, ...], what: str, *, required: bool = False) -> Any:
    """`obj[key]` (the field `where.key` of a message, block or item) when it is a `kind`; None when it is left
    out or null (null reads as left out), or a 400 '`where.key` is required' for that when `required`; a 400
    naming the place, the type expected and the value (wrong_type) for any other value."""
    v = obj.get(key)
    place = f"{where}.{key}"
    if v is None:
        if required:
            raise APIError(400, f"{place} is required", param=place)
        return None
    if not isinstance(v, kind):
        raise wrong_type(place, what, v)
    return v


def get_str(body: dict, name: str, default: str | None = None, *, required: bool = False) -> str | None:
    v = _get_typed(body, name, str, "a string", required=required)
    return default if v is None else v


def get_bool(body: dict, name: str, default: bool = False) -> bool:
    v = _get_typed(body, name, bool, "a boolean")
    return default if v is None else v


def get_number(body: dict, name: str, default: float | None, lo: float, hi: float) -> float | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise APIError(400, f"'{name}' must be a number, got {_type_name(v)}", param=name)
    if not lo <= v <= hi:
        raise APIError(400, f"'{name}' must be between {lo:g} and {hi:g}, got {v}", param=name)
    return float(v)


def get_int(body: dict, name: str, default: int | None, lo: int, hi: int) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        else:
            raise APIError(400, f"'{name}' must be an integer, got {_type_name(v)}", param=name)
    if not lo <= v <= hi:
        raise APIError(400, f"'{name}' must be between {lo} and {hi}, got {v}", param=name)
    return v


def get_max_tokens(body: dict, names: tuple[str, ...], default: int | None) -> int | None:
    for name in names:
        if body.get(name) is not None:
            return get_int(body, name, None, 1, MAX_TOKENS_LIMIT)
    return default


# stop strings of a code completion (/v1/completions, /infill): Continue's autocomplete sends its template's (9 for
# Qwen2.5-Coder) with its multi-line, common and language stops (17 for Python, 19 for TypeScript); llama.cpp takes any
CODE_STOP_LIMIT = 64


def get_stop(body: dict, name: str, limit: int = 16) -> tuple[str, ...]:
    v = body.get(name)
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise APIError(400, f"'{name}' must be a string or an array of strings", param=name)
    if len(v) > limit:
        raise APIError(400, f"'{name}' has {len(v)} entries; at most {limit}", param=name)
    return tuple(s for s in v if s)


def get_list(body: dict, name: str, *, required: bool = False, nonempty: bool = False) -> list | None:
    v = _get_typed(body, name, list, "an array", required=required)
    if nonempty and v is not None and not v:
        raise APIError(400, f"'{name}' must not be empty", param=name)
    return v


def expect_object(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise APIError(400, f"{where} must be an object, got {_type_name(v)}", param=where)
    return v


NO_PARAMETERS = {"type": "object", "properties": {}}


def tool_schema(schema: Any, where: str) -> dict:
    """A tool's parameters schema as templates read it: absent (None) is a function without parameters (an
    empty object schema, which templates that read `tool.parameters.properties` need); 400 naming `where`
    for one that is not an object or whose `properties` is not an object."""
    if schema is None:
        return dict(NO_PARAMETERS)
    if not isinstance(schema, dict):
        raise APIError(400, f"{where} must be a JSON schema object", param="tools")
    if "properties" in schema and not isinstance(schema["properties"], dict):
        raise APIError(400, f"{where}.properties must be an object, got {_type_name(schema['properties'])}",
                       param="tools")
    return schema


def objects(items: list, where: str) -> Iterator[tuple[str, dict]]:
    """Each entry of an array with its place (`where[i]`, for error messages), one by one; 400 naming the
    place of an entry that is not an object."""
    for i, v in enumerate(items):
        yield f"{where}[{i}]", expect_object(v, f"{where}[{i}]")


def text_of_parts(parts: list, where: str, *, text_types: tuple[str, ...], media_types: tuple[str, ...],
                  noun: str) -> str:
    """The text of an array of content parts (OpenAI) or blocks (Anthropic, `noun`): the text entries
    joined; 400 naming the entry for a media type (the model reads text only) or any other type."""
    out = []
    for pw, part in objects(parts, where):
        kind = part.get("type")
        if kind in text_types:
            out.append(field(part, pw, "text", str, "a string", required=True))
        elif kind in media_types:
            raise APIError(400, f"{pw}: {kind} {noun} are not supported (the model reads text only)", param=where)
        else:
            raise APIError(400, f"{pw}.type {kind!r} is not supported; use 'text'", param=where)
    return "".join(out)
