"""A session saved by its messages (POST /v1/sessions/{name}/save with `messages`) whose history a context holds in
the model's own tokens for an earlier answer (byte-aligned on the next turn, byte_align.py): the messages rendered
canonically part from that history at the answer's first split, so the save must align them as an arriving prompt
is aligned. The default model, a live server on loopback."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer
from tests.server.test_history_tokens_reused import TEXT, complete, split_otherwise


@pytest.fixture(scope="module")
def server(default_model_path, tmp_path_factory):
    sessions = tmp_path_factory.mktemp("sessions")
    with LiveServer(model=str(default_model_path), ctx=2048, batch=1, threads=2, conversation_cache_mib=64,
                    conversation_cache_sessions_dir=str(sessions)) as s:
        yield s


def chat(url: str, messages: list[dict]) -> dict:
    r = httpx.post(url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 1, "temperature": 0},
                   timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_history_holding_an_answer_in_the_models_tokens_is_saved_by_its_messages(server):
    tok = server.state.engine.tokenizer
    messages = [{"role": "system", "content": "You are a storyteller."}, {"role": "user", "content": "Tell me a line."}]
    n_prompt = chat(server.url, messages)["usage"]["prompt_tokens"]
    rendered = next(list(c.tokens) for c in server.state.scheduler.table.contexts if len(c.tokens) == n_prompt)
    _, other = split_otherwise(tok)
    complete(server.url, rendered + other, 1)       # the context holds the prompt and the answer split otherwise
    messages += [{"role": "assistant", "content": TEXT}, {"role": "user", "content": "Thanks. Another one."}]
    usage = chat(server.url, messages)["usage"]     # aligned: the history keeps `other` for the answer
    assert usage["prompt_tokens_details"]["cached_tokens"] == len(rendered) + len(other), usage
    r = httpx.post(server.url + "/v1/sessions/story/save", json={"messages": messages}, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["n_tokens"] >= usage["prompt_tokens"], r.json()
    # ending with the answer: the prompt that asked for it held whole, and the answer as the model wrote it
    r = httpx.post(server.url + "/v1/sessions/line/save", json={"messages": messages[:3]}, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["n_tokens"] >= len(rendered) + len(other), r.json()


def test_a_parked_history_holding_an_answer_in_the_models_tokens_is_saved_by_its_messages(server):
    """The same history once only the conversation cache holds it (other conversations took every context): the
    messages are aligned with the cache's entries too (context_choice.aligned_with_histories), so the save reads
    the entry back and saves it whole; aligned with the contexts only, it saved the tokens before the answer's first
    split (24 of 46)."""
    tok = server.state.engine.tokenizer
    messages = [{"role": "system", "content": "You are a poet."}, {"role": "user", "content": "Write a verse."}]
    n_prompt = chat(server.url, messages)["usage"]["prompt_tokens"]
    rendered = next(list(c.tokens) for c in server.state.scheduler.table.contexts if len(c.tokens) == n_prompt)
    _, other = split_otherwise(tok)
    complete(server.url, rendered + other, 1)
    for i in range(len(server.state.scheduler.table.contexts)):     # parks it: the contexts hold other text now
        complete(server.url, f"{i} Seven green parrots argued loudly about the best mango tree.", 1)
    held = rendered + other
    assert not any(list(c.tokens[:len(held)]) == held for c in server.state.scheduler.table.contexts)
    messages += [{"role": "assistant", "content": TEXT}]
    r = httpx.post(server.url + "/v1/sessions/verse/save", json={"messages": messages}, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["n_tokens"] >= len(held), r.json()
