"""docs/api.md's endpoint table names every route `strata serve` answers: each `METHOD /path` of the
server's route table (the session routes included), and each route without the `/v1` prefix is named
in the sentence that lists them. A route added without a word in the doc fails here. Not here: what
each endpoint answers (tests/server)."""

from __future__ import annotations

import re
from pathlib import Path

from aiohttp import web
from strata.server.routes import add_routes

API_DOC = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
TABLE = API_DOC.split("\n## ")[0]          # the page's top: the endpoint table and the prefix sentence
UNPREFIXED = re.search(r"^(.*?)also answer\s+without the `/v1` prefix", TABLE, flags=re.M | re.S)


def served_routes() -> set[tuple[str, str]]:
    app = web.Application()
    add_routes(app)
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}


def test_the_route_table_has_the_routes_of_each_kind():
    routes = served_routes()
    assert ("POST", "/v1/messages") in routes and ("GET", "/v1/sessions") in routes
    assert ("POST", "/chat/completions") in routes


def test_every_route_is_in_the_endpoint_table():
    missing = sorted(f"{method} {path}" for method, path in served_routes()
                     if path.startswith(("/v1/", "/health", "/api/", "/metrics"))
                     and f"`{method} {path}`" not in TABLE)
    assert missing == [], f"not in docs/api.md's endpoint table: {missing}"


def test_every_route_without_v1_is_named_as_such():
    assert UNPREFIXED, "docs/api.md no longer says which endpoints answer without /v1"
    sentence = TABLE[TABLE.rfind("\n\n", 0, UNPREFIXED.end()):UNPREFIXED.end()]
    named = set(re.findall(r"`(/v1/[^`]+)`", sentence))
    routes = served_routes()
    missing = sorted(path for method, path in routes
                     if not path.startswith(("/v1/", "/health", "/api/", "/metrics"))
                     and ((method, "/v1" + path) not in routes or "/v1" + path not in named)
                     and f"`{method} {path}`" not in TABLE)     # llama.cpp's own path (POST /completion), in the table
    assert missing == [], f"answered without /v1 but not said so in docs/api.md: {missing}"
