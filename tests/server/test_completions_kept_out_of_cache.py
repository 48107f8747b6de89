"""An editor's code completions beside an agent do not push the agent's history out of the conversation cache.
Each keystroke's completion shares the file's top with the one before and differs after the cursor, so every
completion a context gave up was parked as a cache entry of its own: they filled the RAM level and, oldest first,
deleted the agent's parked history, whose next turn read everything again. A completion's history now stays in
the contexts only (ContextState.completion). A real server (tiny model with FIM tokens, --batch 4, slots of 1,024
tokens so that the agent's 3,900-token history is parked to the cache when a side request displaces it from main,
RAM level 2 MiB: the agent's entry is 1.0 MB, a completion's 0.26 MB). Before: 12 parks into RAM, 4 evictions,
the agent's next turn reused 0 of 3,941 tokens; now 1 park (the agent's) and it reuses 3,925. (Completions run in
the slots and leave main alone, tests/server/test_completions_leave_main.py; as plain requests each would take
main and park the one before.)"""

from __future__ import annotations

import pytest
import requests

from tests.server.live import LiveServer

WORDS = "the model reads the whole conversation once and keeps its state in a slot. "
CODE = "def step(self, x):\n    return self.layer(x) + x\n" * 40


@pytest.fixture(scope="module")
def server(fim_cache_server):
    return fim_cache_server


def ram(server: LiveServer) -> dict[str, float]:
    text = requests.get(server.url + "/metrics", timeout=10).text
    wanted = {'strata_cache_parks_total{destination="ram"}': "parks", 'strata_cache_level_entries{level="ram"}': "entries",
              'strata_cache_evictions_total{level="ram"}': "evictions"}
    return {wanted[k]: float(v) for k, v in (line.rsplit(" ", 1) for line in text.splitlines()) if k in wanted}


def test_completions_leave_the_agents_parked_history_in_the_cache(server):
    messages = [{"role": "user", "content": WORDS * 170}]
    first = requests.post(server.url + "/v1/chat/completions", timeout=60,
                          json={"messages": messages, "max_tokens": 4, "temperature": 0}).json()
    assert first["usage"]["prompt_tokens"] > 1024                      # longer than a slot: main, then the cache
    side = requests.post(server.url + "/v1/chat/completions", timeout=60, json={          # a title: takes main
        "messages": [{"role": "user", "content": "a title for: " + WORDS}], "max_tokens": 2, "temperature": 0})
    assert side.status_code == 200 and ram(server)["parks"] == 1      # the agent's history, parked to the cache
    reused = []
    for i in range(12):                                                # the user types; each runs in a slot
        a = requests.post(server.url + "/infill", timeout=60, json={
            "input_prefix": CODE, "prompt": "y = " + "x" * i, "input_suffix": "\n\nprint(y)\n" * 5, "n_predict": 4,
            "temperature": 0}).json()
        reused.append(a["timings"]["cache_n"] / a["tokens_evaluated"])
    assert min(reused[1:]) > 0.9                  # consecutive completions still reuse each other in the contexts
    assert ram(server) == {"parks": 1, "entries": 1, "evictions": 0}  # the agent's history only
    messages += [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "go on"}]
    turn = requests.post(server.url + "/v1/chat/completions", timeout=60,
                         json={"messages": messages, "max_tokens": 4, "temperature": 0}).json()
    could = first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"]
    assert turn["usage"]["prompt_tokens_details"]["cached_tokens"] >= could - 1     # from the RAM level


def test_the_suffix_form_of_a_completion_is_kept_out_too(server):
    """(After the test above: the agent's turn holds main.)"""
    before = ram(server)["parks"]
    parks = []
    for i in range(4):
        r = requests.post(server.url + "/v1/completions", timeout=60, json={
            "prompt": CODE + "y = " + "x" * i, "suffix": "\n\nprint(y)\n", "max_tokens": 2, "temperature": 0})
        assert r.status_code == 200
        parks.append(ram(server)["parks"])
    assert parks == [before] * 4
