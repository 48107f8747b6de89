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
from tests.server.test_cancelled_counts import hold_worker, wait_for

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
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, queue=0, conversation_cache_mib=0) as s:
        sched, c = s.state.scheduler, client(s)
        held, release = hold_worker(sched, 0)
        assert held.wait(60)
        got: dict[str, anthropic.APIStatusError] = {}
        queued = threading.Thread(target=lambda: got.update(queued=refusal(client(s), stream)))
        queued.start()
        wait_for(lambda: sched.queue_depth == 1)
        full = refusal(c, stream)                  # --queue 0 and one waiting
        assert "the queue is full" in full.message
        assert_retried_overloaded(c, full, "2")
        stopping = threading.Thread(target=sched.stop)
        stopping.start()
        wait_for(lambda: sched.stopping)
        release.set()                              # the worker ends its turn and stops: the queued one is refused
        stopping.join(60)
        queued.join(60)
        assert "the server is stopping" in got["queued"].message
        assert_retried_overloaded(c, got["queued"], "5")
        late = refusal(c, stream)                  # submitted once the stop began
        assert "the server is stopping" in late.message
        assert_retried_overloaded(c, late, "5")


def test_a_stream_a_stop_cuts_ends_with_an_overloaded_error_event(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        sched = s.state.scheduler
        held, release = hold_worker(sched, 0)
        assert held.wait(60)
        got: dict[str, anthropic.APIStatusError] = {}
        seen = threading.Event()
        streaming = threading.Thread(
            target=lambda: got.update(cut=refusal(client(s), True, max_tokens=1000, seen=seen)))
        streaming.start()
        wait_for(lambda: sched.queue_depth == 1)
        held2, release2 = hold_worker(sched, 2)    # the stream starts and makes a few tokens, then held again
        release.set()
        assert held2.wait(60)
        assert seen.wait(60), "no text before the hold: the stream never began"
        stopping = threading.Thread(target=sched.stop)
        stopping.start()
        wait_for(lambda: sched.stopping)
        release2.set()
        stopping.join(60)
        streaming.join(60)
        e = got["cut"]
        assert e.status_code == 200 and e.type == "overloaded_error", (e.status_code, e.type, e.message)
        assert "the server is stopping" in e.message
