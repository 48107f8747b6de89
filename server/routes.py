"""The HTTP routes of `strata serve`: only the table (handlers live in their modules)."""

from __future__ import annotations

from aiohttp import web
from strata.server import (
    anthropic_api,
    completion_api,
    infill_api,
    monitor_feed,
    openai_api,
    openai_completions,
    responses_api,
    responses_socket,
    service,
)


def add_routes(app: web.Application) -> None:
    app.router.add_routes([
        web.get("/health", service.health),
        web.get("/api/hello", service.health),
        web.get("/metrics", service.metrics),
        web.get("/v1/models", openai_api.models),
        web.get("/models", openai_api.models),
        web.get("/v1/models/{model:.+}", openai_api.model),
        web.get("/models/{model:.+}", openai_api.model),
        web.post("/v1/chat/completions", openai_api.chat_completions),
        web.post("/chat/completions", openai_api.chat_completions),
        web.post("/v1/completions", openai_completions.completions),
        web.post("/completions", completion_api.completions),     # llama.cpp's without a model, else OpenAI's
        web.post("/completion", completion_api.completion),
        web.post("/infill", infill_api.infill),
        web.post("/v1/infill", infill_api.infill),
        web.post("/v1/responses", responses_api.responses),
        web.get("/v1/responses", responses_socket.responses_socket),
        web.get("/responses", responses_socket.responses_socket),
        web.post("/v1/responses/compact", responses_api.compact),
        web.post("/responses/compact", responses_api.compact),
        web.post("/v1/responses/input_tokens", responses_api.input_tokens),
        web.post("/responses/input_tokens", responses_api.input_tokens),
        web.post("/responses", responses_api.responses),
        web.post("/v1/messages", anthropic_api.messages),
        web.post("/v1/messages/count_tokens", anthropic_api.count_tokens),
        web.get("/v1/slots", monitor_feed.slots),
        web.get("/slots", monitor_feed.slots),
        web.get("/v1/monitor", monitor_feed.monitor),
        web.get("/v1/monitor/events", monitor_feed.monitor_events),
    ])
    try:
        from strata.server.cache.http import add_session_routes
    except ImportError:
        return
    add_session_routes(app)
