"""What the `anthropic` SDK (max_retries=0) gets from /v1/messages when a request is refused or cut: a full queue
and a stopping server answer 503 `overloaded_error` with Retry-After (ServiceUnavailableError, which the SDK's
_should_retry retries after that wait); an answer a stop cuts after its stream began ends with an `error` event of
type `overloaded_error` (a temporary condition; `api_error` is Anthropic's 500, an unexpected failure). A streamed
request still queued when the stop came got a 200 stream whose only content was an `api_error` event: nothing the
SDK retries, and the wrong type."""

from __future__ import annotations

import threading

import anthropic
import pytest

from tests.server.live import LiveServer
from tests.server.stop_scenes import refusals_around_a_stop, stream_cut_by_a_stop

MESSAGES = [{"role": "user", "content": "count to ten"}]


def client(s: LiveServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=s.url, api_key="unused", max_retries=0, timeout=60)


def ask(c: anthropic.Anthropic, stream: bool, max_tokens: int = 4, seen: threading.Event | None = None):
    if stream:
        with c.messages.stream(model="tiny", max_tokens=max_tokens, messages=MESSAGES) as s:
            for event in s:
                if seen is not None and event.type == "content_block_delta":
                    seen.set()
            return s.get_final_message()
    return c.messages.create(model="tiny", max_tokens=max_tokens, messages=MESSAGES)


def refusal(c: anthropic.Anthropic, stream: bool, **kw) -> anthropic.APIStatusError:
    with pytest.raises(anthropic.APIStatusError) as caught:
        ask(c, stream, **kw)
    return caught.value


def assert_retried_overloaded(c: anthropic.Anthropic, e: anthropic.APIStatusError, retry_after: str) -> None:
    assert isinstance(e, anthropic.ServiceUnavailableError), type(e).__mro__
    assert e.status_code == 503 and e.type == "overloaded_error", (e.status_code, e.type, e.message)
    assert e.response.headers["retry-after"] == retry_after
    assert c._should_retry(e.response)      # the SDK's own rule: with retries on, it would wait and ask again


@pytest.mark.parametrize("stream", [False, True])
def test_a_full_queue_and_a_stopping_server_answer_503_overloaded_error(tiny_model, stream):
    got = refusals_around_a_stop(str(tiny_model), lambda s: refusal(client(s), stream))
    c = anthropic.Anthropic(api_key="unused")
    assert "the queue is full" in got["full"].message
    assert_retried_overloaded(c, got["full"], "2")
    for when in ("queued", "late"):                # queued at the stop; submitted once it began
        assert "the server is stopping" in got[when].message
        assert_retried_overloaded(c, got[when], "5")


def test_a_stream_a_stop_cuts_ends_with_an_overloaded_error_event(tiny_model):
    got: dict[str, anthropic.APIStatusError] = {}
    stream_cut_by_a_stop(str(tiny_model), lambda s, seen: got.update(
        cut=refusal(client(s), True, max_tokens=1000, seen=seen)))
    e = got["cut"]
    assert e.status_code == 200 and e.type == "overloaded_error", (e.status_code, e.type, e.message)
    assert "the server is stopping" in e.message
