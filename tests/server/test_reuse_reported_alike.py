"""One request's reuse is the same number wherever it is reported: `usage` (cached_tokens,
cache_read_input_tokens), `timings.cache_n`, the monitor's `requests[]` entry, its placement in
`decisions` (GET /v1/slots, GET /v1/monitor) and the log. Real server on loopback, real SDKs."""

from __future__ import annotations

import logging

import httpx2 as httpx


def placement_of(url: str, request_id: int) -> dict:
    """The request's placement entry in the trace (not a park of main's history)."""
    decisions = httpx.get(url + "/v1/slots").json()["decisions"]
    return next(d for d in reversed(decisions) if d["request"] == request_id and not d["park"] and not d["park_skip"])


def test_a_repeated_prompt_reports_the_reuse_it_got_in_the_trace(tiny_server, oai, claude, caplog):
    """The same prompt sent again reuses all of it but its last token (read again for the answer's first
    logits). The trace said the whole prompt (82 where usage and the request said 81): its placement
    was recorded from the context's common prefix, never capped or settled to what the request got."""
    msgs = [{"role": "user", "content": "the same question, asked twice " * 4}]
    caplog.set_level(logging.INFO, logger="strata")
    for _ in range(2):
        r = oai.chat.completions.create(model="m", messages=msgs, max_tokens=3, temperature=0)
    request = httpx.get(tiny_server.url + "/v1/monitor").json()["requests"][-1]
    cached = r.usage.prompt_tokens_details.cached_tokens
    assert cached == r.usage.prompt_tokens - 1 == r.model_extra["timings"]["cache_n"] == request["reused_tokens"]
    assert placement_of(tiny_server.url, request["id"])["reused"] == cached
    said = [rec.getMessage() for rec in caplog.records if f"request {request['id']} " in rec.getMessage()]
    assert any(f"reused={cached} " in line for line in said if line.startswith("slot ")), said

    m = claude.messages.create(model="m", max_tokens=3, messages=msgs, extra_body={"temperature": 0})
    m = claude.messages.create(model="m", max_tokens=3, messages=msgs, extra_body={"temperature": 0})
    request = httpx.get(tiny_server.url + "/v1/monitor").json()["requests"][-1]
    assert m.usage.cache_read_input_tokens == request["reused_tokens"] > 0 and m.usage.input_tokens == 1
    assert placement_of(tiny_server.url, request["id"])["reused"] == m.usage.cache_read_input_tokens
