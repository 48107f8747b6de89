"""A session saved by conversation (`messages`, `tokens` or `conversation` in the save's body) saves that
conversation, or answers why not: never another request's history. A save that named only a context saved
whatever it held when the save ran: in the agent soak 5 of 24 saves stored another request's history, one that
took the slot between the answer and the save. Real servers on a tiny scripted model (its answer is known text, so
the history sent back renders to the tokens the context holds).
"""

from __future__ import annotations

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer, scripted_model

ANSWER = "The answer is warm"
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


@pytest.fixture(scope="module")
def answering_model(tiny_model_factory):
    """A tiny model that answers every chat prompt ANSWER, then ends its turn (<|im_end|>, id 2)."""
    return scripted_model(tiny_model_factory, ANSWER, ctx_len=4096, n_vocab=512, seed=3)


def _server(model, tmp_path) -> LiveServer:
    # main 2,048 tokens and one slot of 512: a lone request runs in main; a history of ~600 tokens displaced from
    # main does not fit the slot and is parked to the conversation cache
    return LiveServer(model=str(model), ctx=2048, batch=1, slot_ctx=512, threads=1, conversation_cache_mib=16,
                      conversation_cache_park_min_free_mib=0, conversation_cache_min_free_mib=0,
                      conversation_cache_sessions_dir=str(tmp_path / "sessions"))


def _chat(url: str, messages: list[dict]) -> dict:
    r = httpx.post(url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 16, "temperature": 0},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _tokens(s: LiveServer, ctx: int) -> list[int]:
    return s.state.scheduler.call(lambda: list(s.state.engine.context_tokens(ctx))).result(60)


def _save(url: str, name: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/sessions/{name}/save", json=body, timeout=120)


def _conversation(url: str, n_words: int) -> tuple[list[dict], int]:
    """A conversation answered in main: its messages with the answer, and its prompt's tokens."""
    messages = [{"role": "system", "content": "You review code."},
                {"role": "user", "content": " ".join(WORDS * (n_words // len(WORDS)))}]
    out = _chat(url, messages)
    answer = out["choices"][0]["message"]["content"]
    assert answer == ANSWER
    return messages + [{"role": "assistant", "content": answer}], out["usage"]["prompt_tokens"]


def _other_request(url: str) -> None:
    """Another client's request, which takes main (the solo context) and displaces what it held."""
    _chat(url, [{"role": "user", "content": "something else entirely"}])


def restored_into_main_and_continued(s: LiveServer, name: str, history: list[dict], held: list[int]) -> None:
    """After another request took main: the save `name` restored into main holds `held`, and the conversation's next
    turn reads only its new message."""
    _other_request(s.url)
    r = httpx.post(f"{s.url}/v1/sessions/{name}/restore", json={"slot": "main"}, timeout=120)
    assert r.status_code == 200 and r.json()["n_tokens"] == len(held), r.text
    assert _tokens(s, 0) == held
    turn = _chat(s.url, history + [{"role": "user", "content": "and next?"}])
    assert turn["usage"]["prompt_tokens_details"]["cached_tokens"] == len(held)


def _sessions(url: str) -> list[str]:
    return [s["name"] for s in httpx.get(url + "/v1/sessions").json()["data"]]


def test_a_save_by_messages_saves_the_conversation_after_another_request_took_its_context(answering_model,
                                                                                         tmp_path):
    with _server(answering_model, tmp_path) as s:
        history, _ = _conversation(s.url, 120)
        held = _tokens(s, 0)                      # the prompt and the answer (its end-of-turn not read)
        assert len(held) > 512
        _other_request(s.url)
        other = _tokens(s, 0)
        # naming the context saves what it holds now: the other request's history
        assert _save(s.url, "by-slot", {"slot": "main"}).json()["n_tokens"] == len(other)

        r = _save(s.url, "work", {"messages": history})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["n_tokens"] == len(held) and body["source"] == "ram", body   # parked: read back, then saved
        assert body["slot"] == "main"             # the one context it fits (the slot holds 512)
        # restored, main holds the conversation's tokens, and its next turn reads only the new message
        restored_into_main_and_continued(s, "work", history, held)


def test_a_save_by_messages_finds_the_context_holding_them_and_saves_only_that_history(answering_model,
                                                                                     tmp_path):
    with _server(answering_model, tmp_path) as s:
        history, n_prompt = _conversation(s.url, 24)
        held = _tokens(s, 0)
        r = _save(s.url, "work", {"messages": history})
        assert r.status_code == 200, r.text
        assert (r.json()["slot"], r.json()["source"], r.json()["n_tokens"]) == ("main", "context", len(held))
        # the prompt alone (the answer not sent back) is saved as that: nothing past it
        r = _save(s.url, "prompt", {"messages": history[:-1]})
        assert r.status_code == 200 and r.json()["slot"] == "main", r.text
        assert r.json()["n_tokens"] == n_prompt < len(held)
        # slot 1 holds the conversation (restored there), then another request takes main (parked to the cache):
        # found in slot 1 (a context before an equal cache entry: nothing to read back)
        r = httpx.post(s.url + "/v1/sessions/work/restore", json={"slot": 1}, timeout=120)
        assert r.status_code == 200 and _tokens(s, 1) == held, r.text
        _other_request(s.url)
        assert _tokens(s, 0) != held
        r = _save(s.url, "again", {"messages": history})
        assert r.status_code == 200, r.text
        assert (r.json()["slot"], r.json()["source"], r.json()["n_tokens"]) == (1, "context", len(held))
        # token ids name it exactly
        r = _save(s.url, "ids", {"tokens": held[:50]})
        assert r.status_code == 200 and r.json()["n_tokens"] == 50, r.text
        r = httpx.post(s.url + "/v1/sessions/ids/restore", json={"slot": "main"}, timeout=120)
        assert r.status_code == 200 and _tokens(s, 0) == held[:50], r.text


def test_a_save_guarded_by_its_conversation_refuses_when_another_request_took_the_slot(answering_model, tmp_path):
    with _server(answering_model, tmp_path) as s:
        history, _ = _conversation(s.url, 120)
        held = _tokens(s, 0)
        key = httpx.get(s.url + "/v1/slots").json()["slots"][0]["conversation"]
        # while main holds it, the guard passes: main's history is saved
        for name, body in (("by-messages", {"slot": "main", "messages": history}),
                           ("by-key", {"slot": "main", "conversation": key}), ("key-only", {"conversation": key})):
            r = _save(s.url, name, body)
            assert r.status_code == 200 and r.json()["n_tokens"] == len(held), (name, r.text)
        _other_request(s.url)
        before = _sessions(s.url)
        for body in ({"slot": "main", "messages": history}, {"slot": "main", "conversation": key},
                     {"slot": "main", "tokens": held}):
            r = _save(s.url, "taken", body)
            assert r.status_code == 409, r.text
            err = r.json()["error"]
            assert err["type"] == "conflict_error" and "another request took it" in err["message"], err
        assert _sessions(s.url) == before         # nothing saved
        # without the slot, the conversation is found where it went (the cache) and saved
        r = _save(s.url, "taken", {"messages": history})
        assert r.status_code == 200 and r.json()["n_tokens"] == len(held), r.text


def test_a_history_held_nowhere_is_a_404_and_bad_bodies_are_400s(answering_model, tmp_path):
    with _server(answering_model, tmp_path) as s:
        history, _ = _conversation(s.url, 24)
        other = [{"role": "system", "content": "Another prompt."}, {"role": "user", "content": "never sent"}]
        r = _save(s.url, "nowhere", {"messages": other})
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error", r.text
        assert "is not held here" in r.json()["error"]["message"]
        r = _save(s.url, "nowhere", {"conversation": "0123456789ab"})
        assert r.status_code == 404, r.text
        assert _sessions(s.url) == []
        for body, said in (({"messages": history, "tokens": [1, 2]}, "one way"),
                           ({"messages": []}, "messages must be a non-empty array"),
                           ({"tokens": [1, "x"]}, "tokens must be an array of token ids"),
                           ({"tokens": [1, 99999]}, "outside the vocabulary"),
                           ({"conversation": 7}, "conversation must be a conversation key"),
                           ({"messages": [{"role": "nobody", "content": "x"}]}, "role must be one of")):
            r = _save(s.url, "bad", body)
            assert r.status_code == 400 and said in r.text, (body, r.text)
        assert _sessions(s.url) == []
