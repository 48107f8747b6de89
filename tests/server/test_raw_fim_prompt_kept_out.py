"""A code completion whose client lays out the fill-in-the-middle prompt itself (Continue's autocomplete templates
through /v1/completions, no `suffix`: `<|fim_prefix|>{prefix}<|fim_suffix|>{suffix}<|fim_middle|>`) is a completion
as one with a `suffix` is: its history stays in the contexts and is never parked into the conversation cache, and it
ends at the model's FIM end tokens. 30166d7 marked only /infill and the `suffix` form, so each keystroke of such an
editor displaced the one before into the RAM level, as every completion did before it.

A real server (tiny model with FIM tokens, --batch 4, 1,024-token slots, RAM level 2 MiB), the shape of
test_completions_kept_out_of_cache: the completions run in the slots and park nothing; as plain requests each took
main (alone), the first parking the agent's history and each one after the one before."""

from __future__ import annotations

import pytest
import requests

from tests.server.live import LiveServer
from tests.server.test_completions_kept_out_of_cache import CODE, WORDS


@pytest.fixture(scope="module")
def server(fim_cache_server):
    return fim_cache_server


def ram_parks(server: LiveServer) -> float:
    text = requests.get(server.url + "/metrics", timeout=10).text
    return next(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith('strata_cache_parks_total{destination="ram"}'))


def test_completions_laid_out_by_the_client_park_nothing(server):
    first = requests.post(server.url + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": WORDS * 170}], "max_tokens": 4, "temperature": 0}).json()
    assert first["usage"]["prompt_tokens"] > 1024                      # longer than a slot: main, then the cache
    parks = []
    for i in range(6):                                                 # the user types; each runs in a slot
        prompt = f"<|fim_prefix|>{CODE}y = {'x' * i}<|fim_suffix|>\n\nprint(y)\n<|fim_middle|>"
        r = requests.post(server.url + "/v1/completions", timeout=60,
                          json={"prompt": prompt, "max_tokens": 2, "temperature": 0})
        assert r.status_code == 200, r.text
        parks.append(ram_parks(server))
    assert parks == [0.0] * 6           # nothing (before: 1, 2, ... 6: the agent's, then each keystroke's)


def test_a_prompt_without_the_middle_token_at_its_end_is_not_a_completion(server):
    """Text that merely mentions the tokens (a prompt going on after them) is a plain prompt: it runs alone in main as
    any other (the agent's history parked), and its history is parked when the next request displaces it."""
    before = ram_parks(server)
    for i in range(2):
        prompt = f"<|fim_prefix|>{CODE}<|fim_suffix|>tail<|fim_middle|>and then {i} " + WORDS * (3 + 20 * i)
        r = requests.post(server.url + "/v1/completions", timeout=60,
                          json={"prompt": prompt, "max_tokens": 2, "temperature": 0})
        assert r.status_code == 200, r.text
    assert ram_parks(server) == before + 2     # the agent's history, then the first one's, displaced from main
