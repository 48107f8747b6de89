"""A scored prompt (/v1/completions echo + logprobs, max_tokens 0: lm-eval-harness's loglikelihood) is never parked
into the conversation cache. An evaluation sends thousands of distinct prompts, none of them a conversation that
goes on; each a context gave up was parked as a cache entry of its own, and they pushed the agents' parked
histories out of RAM, oldest first (a review of the scoring commits found it). Its history stays in the contexts
alone, as a code completion's does (ContextState.completion); an ordinary prompt displaced the same way is parked
(the control)."""

from __future__ import annotations

import requests

from tests.server.live import LiveServer

TEXT = "the model reads the whole conversation once and keeps its state in a slot. "


def parks(server: LiveServer) -> float:
    text = requests.get(server.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("strata_cache_parks_total{") and 'destination="discard"' not in line)


def complete(server: LiveServer, prompt: str, **extra) -> dict:
    r = requests.post(server.url + "/v1/completions", timeout=60,
                      json={"prompt": prompt, "max_tokens": 1, "temperature": 0, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_scored_prompts_are_not_parked_and_ordinary_ones_are(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=2048, batch=1, slot_ctx=1024, threads=1,
                    conversation_cache_mib=64) as server:
        for i in range(4):                       # one after another: each displaces the one before
            scored = complete(server, f"{i} " + TEXT * 8, echo=True, logprobs=1, max_tokens=0)
            assert scored["choices"][0]["logprobs"]["token_logprobs"][0] is None
        assert parks(server) == 0
        for i in range(3):
            complete(server, f"{i} " + TEXT * 8)
        assert parks(server) >= 2                # the ordinary ones displaced are parked


def test_a_scored_history_does_not_hold_a_conversation_for_the_stop():
    """A stop writes a history once where another context holds it whole (slots.held_by_another); a scored prompt's
    context is never written, so a conversation it happens to extend must be written from its own context."""
    from server.slots import ContextState, held_by_another

    conversation = ContextState(id=0, group=0, capacity=64, tokens=[1, 2, 3])
    scored = ContextState(id=1, group=0, capacity=64, tokens=[1, 2, 3, 4], scored=True)
    assert not held_by_another([conversation, scored], 0)
    scored.scored = False                      # the same history as an ordinary one holds it
    assert held_by_another([conversation, scored], 0)



def test_a_scored_history_does_not_hold_a_copy_but_its_last_token():
    """A superseded copy is dropped unparked where another context holds it whole but its last token
    (parking._holds_but_last_token, for kept_elsewhere); a scored prompt's context is never written, so it holds
    nothing there either (held_by_another's rule above): the copy was dropped and the conversation lost."""
    from server.parking import _holds_but_last_token
    from server.slots import ContextState

    copy = [1, 2, 3, 4]
    scored = ContextState(id=1, group=0, capacity=64, tokens=[1, 2, 3, 9, 10], scored=True)
    assert not _holds_but_last_token(1, scored, 0, copy)
    scored.scored = False                      # the same history as an ordinary one holds it
    assert _holds_but_last_token(1, scored, 0, copy)
